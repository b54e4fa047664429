"""The test settings of a project without time zones (``USE_TZ = False``, Django's
default before 5.0): naive datetimes mean local time in ``TIME_ZONE``. A zone
far from UTC, so a moment read in the wrong one is hours off, not equal by chance.

CI runs the tests marked ``moments`` with these settings too (``make test-naive-time``).
"""

from tests.settings import *  # noqa: F403

USE_TZ = False
TIME_ZONE = "America/Chicago"
