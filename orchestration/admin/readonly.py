"""What the console's pages share: rows are never added, edited or deleted
through forms; changes go through transitions (and retention's purge)."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest


class ReadOnlyConsole:
    """A ``ModelAdmin`` mixin: the console's stylesheet and live refresh, and no add, change or delete."""

    class Media:
        css = {"all": ("orchestration/admin.css",)}
        js = ("orchestration/live.js",)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Deleting is retention's job (purge_workflows), which spares unfinished work.
        return False
