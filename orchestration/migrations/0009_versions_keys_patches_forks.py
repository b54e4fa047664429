"""Versions: how long an idempotency key holds (``key_scope``), the patches a
run took (``patches``, for ``ctx.patched``), and the run a fork came from
(``forked_from``).

``uniq_workflows_idempotency_key`` is rebuilt to leave out keys with a scope
(the table is locked for writes while it is built, a few seconds per million
keyed rows); the two new unique indexes (the arbiters of a scoped start's ON
CONFLICT), the scoped keys' index (the admin's search by key reads it with the
first) and the forks' index hold no existing row. Adding nullable columns
rewrites nothing.
"""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('orchestration', '0008_flow_control'),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name='workflow',
            name='uniq_workflows_idempotency_key',
        ),
        migrations.AddField(
            model_name='workflow',
            name='forked_from',
            field=models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='forks', to='orchestration.workflow'),
        ),
        migrations.AddField(
            model_name='workflow',
            name='key_scope',
            field=models.CharField(blank=True, choices=[('active', 'Active'), ('debounce', 'Debounce')], max_length=10, null=True),
        ),
        migrations.AddField(
            model_name='workflow',
            name='patches',
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.AddIndex(
            model_name='workflow',
            index=models.Index(condition=models.Q(('key_scope__isnull', False)), fields=['idempotency_key'], name='idx_workflows_scoped_key'),
        ),
        migrations.AddIndex(
            model_name='workflow',
            index=models.Index(condition=models.Q(('forked_from__isnull', False)), fields=['forked_from'], name='idx_workflows_forked_from'),
        ),
        migrations.AddConstraint(
            model_name='workflow',
            constraint=models.UniqueConstraint(condition=models.Q(('idempotency_key__isnull', False), ('key_scope__isnull', True)), fields=('idempotency_key',), name='uniq_workflows_idempotency_key'),
        ),
        migrations.AddConstraint(
            model_name='workflow',
            constraint=models.UniqueConstraint(condition=models.Q(('key_scope', 'active'), ('status__in', ('pending', 'running'))), fields=('idempotency_key',), name='uniq_workflows_active_key'),
        ),
        migrations.AddConstraint(
            model_name='workflow',
            constraint=models.UniqueConstraint(condition=models.Q(('key_scope', 'debounce'), ('started_at__isnull', True), ('status', 'pending')), fields=('idempotency_key',), name='uniq_workflows_debounce_key'),
        ),
    ]
