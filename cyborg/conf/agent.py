# SPDX-License-Identifier: Apache-2.0
"""Options of the agent, its drivers and Placement reporting."""

from oslo_config import cfg

agent_opts = [
    cfg.ListOpt('enabled_drivers', default=['fake'],
                help='Drivers the agent loads (stevedore namespace '
                     'cyborg.accelerator.driver): fake, pci, nvidia.'),
    cfg.StrOpt('resource_provider_name',
               help='Name of this host\'s compute node resource provider '
                    '(Nova\'s hypervisor nodename). Defaults to '
                    '[DEFAULT] host.'),
    cfg.IntOpt('report_interval', default=60, min=1,
               help='Seconds between two discovery/report passes.'),
    cfg.IntOpt('full_resync_interval', default=10, min=1,
               help='Every this many passes the agent re-reads Placement '
                    'instead of trusting its cache (reads only; it writes '
                    'only what differs).'),
    cfg.FloatOpt('placement_retry_max_delay', default=60.0, min=0.1,
                 help='Largest back-off (seconds) while Placement or the '
                      'compute node provider is unavailable.'),
    cfg.HostAddressOpt('metrics_listen', default='127.0.0.1',
                       help='Address the agent serves Prometheus metrics '
                            'on (GET /metrics, no authentication: keep it '
                            'on a management network).'),
    cfg.IntOpt('metrics_port', default=0, min=0, max=65535,
               help='Port of the agent\'s Prometheus metrics endpoint; 0 '
                    'turns it off.'),
]

fake_driver_opts = [
    cfg.StrOpt('host_spec',
               help='YAML file describing the fake host\'s devices; '
                    'defaults to the shipped gpu-host spec.'),
]

pci_driver_opts = [
    cfg.MultiStrOpt('device_spec', default=[],
                    help='Which PCI devices the pci driver manages, one '
                         'JSON object per value in Nova\'s [pci] '
                         'device_spec style: {"vendor_id": "10de", '
                         '"product_id": "2335", "address": "0000:1b:*", '
                         '"device_type": "GPU", "resource_class": '
                         '"PGPU", "traits": "CUSTOM_A,CUSTOM_B"}.'),
    cfg.MultiStrOpt('nova_device_spec', default=[],
                    help='Nova\'s own [pci] device_spec entries on this '
                         'host; devices they match are left to Nova.'),
    cfg.StrOpt('sysfs_root', default='/sys',
               help='Root of sysfs (tests point it at a fake tree).'),
]

nvidia_opts = [
    cfg.StrOpt('sysfs_root', default='/sys',
               help='Root of sysfs, where driver binding, SR-IOV and IOMMU '
                    'state are read (tests point it at a fake tree).'),
    cfg.BoolOpt('rebind_for_passthrough', default=False,
                help='Let a whole-GPU bind move a GPU from the nvidia driver '
                     'to the passthrough driver (and back at unbind) when '
                     'the safety gates pass: no processes, no MIG '
                     'instances, no VFs, IOMMU on. Off: only GPUs already '
                     'on the passthrough driver are handed to VMs.'),
    cfg.BoolOpt('adopt_passthrough', default=False,
                help='Treat a GPU found on the passthrough driver with no '
                     'claim as ours to hand out (an operator binds GPUs to '
                     'vfio-pci at boot). Off: such a binding is someone '
                     'else\'s until it has had no claim for 2 minutes, then '
                     'Orphaned, and an admin reclaims it.'),
    cfg.StrOpt('passthrough_driver', default='vfio-pci',
               help='Kernel driver a GPU must be bound to for passthrough '
                    '(products not listed in passthrough_drivers).'),
    cfg.DictOpt('passthrough_drivers',
                # The nvgrace-gpu VFIO variant driver's PCI id table
                # (Linux drivers/vfio/pci/nvgrace-gpu/main.c): GH200 120GB
                # 0x2342 and 480GB 0x2345.
                default={'2342': 'nvgrace-gpu-vfio-pci',
                         '2345': 'nvgrace-gpu-vfio-pci'},
                help='VFIO driver per GPU product (PCI device id, 4 hex '
                     'digits: driver) for products that need a VFIO '
                     'variant driver instead of passthrough_driver.'),
    cfg.FloatOpt('rebind_timeout', default=30.0, min=0.1,
                 help='Seconds one sysfs driver write (unbind, probe, '
                      'reset) may take. The nvidia driver\'s unbind waits '
                      'until nothing holds the GPU; past this the bind '
                      'fails with that reason (the kernel may still finish '
                      'the unbind later, leaving the GPU with no driver).'),
    cfg.ListOpt('reset_xids',
                default=['48', '62', '64', '74', '79', '95', '109', '119',
                         '120'],
                help='XIDs whose catalog action is a GPU reset (NVIDIA XID '
                     'catalog, immediate action RESET_GPU): a GPU that '
                     'reported one stays Failed until an admin resets it '
                     '(POST /v2/devices/{uuid}/reset); other fatal XIDs '
                     'clear after health_recovery_after quiet seconds.'),
    cfg.BoolOpt('enable_mig_on_demand', default=True,
                help='Turn MIG mode on for an idle GPU when the first MIG '
                     'instance is asked for (Hopper and later apply it at '
                     'once; Ampere needs a GPU reset, so its bind fails '
                     'with that reason instead).'),
    cfg.BoolOpt('health_events', default=True,
                help='Watch NVML XID and ECC events and probe each GPU on '
                     'every report pass; a fatal error marks the GPU '
                     'Failed (fenced), a GPU off the bus Lost.'),
    cfg.FloatOpt('health_recovery_after', default=300.0, min=0,
                 help='Seconds without a new fatal error, with healthy '
                      'probes, after which a GPU Failed by an XID outside '
                      'reset_xids is Ready again (an admin reset clears '
                      'any fault at once).'),
    cfg.StrOpt('geometry_cache',
               help='JSON file remembering each GPU\'s MIG geometry, so a '
                    'GPU handed to vfio-pci (invisible to NVML) keeps its '
                    'inventory across agent restarts. Unset: memory only.'),
    cfg.IntOpt('share_memory_margin_mb', default=256, min=0,
               help='MiB of a shared GPU\'s memory kept out of its share '
                    'pool besides what the driver reserves (NVML v2 '
                    '`reserved`): CUDA contexts and the MPS server need '
                    'some, and a share must never exceed the card.'),
    cfg.StrOpt('mps_control_command', default='nvidia-cuda-mps-control',
               help='The MPS control program (split like a shell command) '
                    'the agent starts, one daemon per GPU shared by MPS, '
                    'and talks to through its command language.'),
    cfg.StrOpt('mps_root', default='/var/run/cyborg/mps',
               help='Directory under which each MPS-shared GPU gets '
                    '<GPU UUID>/pipe (CUDA_MPS_PIPE_DIRECTORY, which its '
                    'clients set too) and <GPU UUID>/log '
                    '(CUDA_MPS_LOG_DIRECTORY).'),
    cfg.IntOpt('mps_command_timeout', default=15, min=1,
               help='Seconds one MPS control command may take.'),
    cfg.StrOpt('proc_root', default='/proc',
               help='Root of procfs: where the agent reads, through '
                    'privsep, an MPS client\'s environment (<pid>/environ) '
                    'to tell which share it holds, for per-consumer '
                    'metrics, and scans <pid>/fd for processes holding a '
                    'GPU\'s VFIO group open before a reclaim or reset '
                    '(tests point it at a fake tree).'),
    cfg.ListOpt('nova_enabled_mdev_types', default=[],
                help='Nova\'s own [devices] enabled_mdev_types on this '
                     'host (e.g. nvidia-700). A GPU whose VFs (or PF) '
                     'offer one of them is left to Nova, unless '
                     'nova_mdev_device_addresses narrows the type to '
                     'other functions.'),
    cfg.MultiStrOpt('nova_mdev_device_addresses', default=[],
                    help='Nova\'s [mdev_<type>] device_addresses, one '
                         'entry per type: "<type>=<address>,<address>" '
                         '(e.g. nvidia-700=0000:17:00.4,0000:17:00.5). '
                         'A GPU with one of these functions is left to '
                         'Nova.'),
]

GROUPS = {
    'agent': agent_opts,
    'fake_driver': fake_driver_opts,
    'pci_driver': pci_driver_opts,
    'nvidia': nvidia_opts,
}
