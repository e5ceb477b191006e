"""Where a pool's and a node's GPU device files are (docs/security.md).

Pools that exist already keep virtual GPUs (no device files), as their jobs ran until now: a
site with real GPUs sets its pools' device files. Pools made from now on default to NVIDIA's
`/dev/nvidia{index}` and control devices.
"""

from django.db import migrations, models

import scheduling.models.site


class Migration(migrations.Migration):
    dependencies = [
        ("scheduling", "0018_attempt_log_path"),
    ]

    operations = [
        migrations.AddField(
            model_name="pool",
            name="gpu_devices",
            field=models.CharField(blank=True, default="", max_length=255),
            preserve_default=False,
        ),
        migrations.AddField(
            model_name="pool",
            name="control_devices",
            field=models.JSONField(blank=True, default=list),
            preserve_default=False,
        ),
        migrations.AlterField(
            model_name="pool",
            name="gpu_devices",
            field=models.CharField(
                blank=True,
                default="/dev/nvidia{index}",
                help_text="Each GPU's device file on its node, {index} its index (on Slurm: its "
                "place in the node's gres.conf), {node} the node's name. Empty: the GPUs have no "
                "device files (virtual GPUs, counted only).",
                max_length=255,
            ),
        ),
        migrations.AlterField(
            model_name="pool",
            name="control_devices",
            field=models.JSONField(
                blank=True,
                default=scheduling.models.site.default_control_devices,
                help_text="Device files every GPU job gets besides its GPUs', e.g. "
                '["/dev/nvidiactl", "/dev/nvidia-uvm"]. A missing one fails the job.',
            ),
        ),
        migrations.AddField(
            model_name="node",
            name="gpu_devices",
            field=models.CharField(
                blank=True, help_text="Empty: the pool's (a pattern as the pool's).", max_length=255
            ),
        ),
        migrations.AddField(
            model_name="node",
            name="control_devices",
            field=models.JSONField(blank=True, default=None, help_text="Empty: the pool's.", null=True),
        ),
    ]
