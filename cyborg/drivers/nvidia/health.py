# SPDX-License-Identifier: Apache-2.0
"""GPU health for the nvidia driver: NVML events and probes to a phase.

Why a monitor of its own: NVML reports XIDs and ECC errors as events that
must be waited for, while the driver looks at the hardware only once per
discovery pass.  A daemon thread waits for events; the driver feeds one
`health_probe` per GPU and pass (`observe`) and asks for a `verdict`:
('Ready' | 'Failed' | 'Lost', reason, message).

Every verdict recovers without restarting the agent, the most common
complaint about GPU device plugins (k8s-device-plugin#234, #189,
gpu-operator#1065):
- Lost (XID 79, GpuIsLost) -> Ready once a probe succeeds again;
- Failed by a fatal event -> Ready once probes are healthy and no fatal
  event was seen for `recovery_after` seconds, or at once on `reset()`
  (the driver's reclaim calls it after a GPU reset) - except for an XID
  whose catalog action is a GPU reset (`reset_xids`, by default 48, 62,
  64, 74, 95, 109, 119, 120 and a double-bit ECC event): waiting does
  not clear those (contract gpu-to-vm.md §5), so the GPU stays Failed
  until it is reset;
- RowRemapPending / RowRemapFailure / ResetRequired last as long as the
  probe reports them (a pending remap takes effect at the next reset).

XID classes, by the immediate action of NVIDIA's XID catalog
(k8s-device-plugin#1974 asks for exactly this alignment):
- application, never fail a GPU (catalog RESTART_APP: one process
  faulted, the GPU serves the others fine; the device plugin's ignore
  list): 13 graphics engine exception, 31 GPU memory page fault (MMU),
  43 GPU stopped processing, 45 preemptive cleanup, 68 video processor
  exception, and 94 contained ECC error (only the process that touched
  the bad row was stopped, gpu-operator#1065; the row remap it leaves
  pending still fails the GPU through the probe until a reset);
- informational, counted only: 63 row remap / page retirement recorded
  (the remap probe decides), 92 high single-bit ECC rate;
- lost: 79 fallen off the bus;
- fatal, everything else, e.g. 48 double-bit ECC, 62 micro-controller
  halt, 64 row remap failure, 74 NVLink, 95 uncontained ECC, 109 context
  switch timeout (ignored by the device plugin, but RESET_GPU in the
  catalog, #1974), 119/120 GSP.  Unknown XIDs are fatal as in the device
  plugin: a GPU throwing an error nobody classified takes no new work
  until it is quiet for `recovery_after`.  `ignored_xids` adds XIDs to the
  application class (k8s-device-plugin#1340 asks for such a knob).

MIG: an event carries the GPU/compute instance it hit (dra-driver#904).
Application XIDs stay harmless; a fatal one fails the whole GPU, since
ECC, engines and the bus are shared by every instance; the message names
the instance for the operator.
"""

import collections
import dataclasses
import threading
import time

from oslo_log import log

from cyborg.drivers.nvidia.backend import NvmlError

LOG = log.getLogger(__name__)

APPLICATION_XIDS = frozenset((13, 31, 43, 45, 68, 94))
INFORMATIONAL_XIDS = frozenset((63, 92))
LOST_XIDS = frozenset((79,))
XID_MEANINGS = {
    13: 'graphics engine exception',
    31: 'GPU memory page fault',
    43: 'GPU stopped processing',
    45: 'preemptive cleanup, due to previous errors',
    48: 'double-bit ECC error',
    62: 'internal micro-controller halt',
    63: 'ECC page retirement or row remapping recorded',
    64: 'ECC page retirement or row remapper recording failure',
    68: 'video processor exception',
    74: 'NVLink error',
    79: 'GPU has fallen off the bus',
    92: 'high single-bit ECC error rate',
    94: 'contained ECC error',
    95: 'uncontained ECC error',
    109: 'context switch timeout',
    119: 'GSP RPC timeout',
    120: 'GSP error',
}
READY = ('Ready', 'Healthy', 'no fatal GPU error seen')
_DBE = 0x2  # nvmlEventTypeDoubleBitEccError


def classify_xid(xid, ignored=()):
    """'application' | 'informational' | 'lost' | 'fatal'."""
    if xid in APPLICATION_XIDS or xid in ignored:
        return 'application'
    if xid in INFORMATIONAL_XIDS:
        return 'informational'
    if xid in LOST_XIDS:
        return 'lost'
    return 'fatal'


def describe_xid(xid):
    return 'XID %d (%s)' % (xid, XID_MEANINGS.get(xid, 'see the NVIDIA '
                                                  'XID catalog'))


def _where(event):
    if event.get('gi_id') is None:
        return ''
    ci = event.get('ci_id')
    return ' on MIG GPU instance %d%s' % (
        event['gi_id'], '' if ci is None else ', compute instance %d' % ci)


@dataclasses.dataclass
class _Gpu:
    lost: tuple = None          # (reason, message)
    fatal: tuple = None         # (reason, message, clock time)
    needs_reset: bool = False   # the fatal error clears only by a reset
    probe: dict = None          # the last observed health_probe
    probe_at: float = None
    mask: int = None            # registered event types, None: none
    xids: collections.Counter = dataclasses.field(
        default_factory=collections.Counter)
    ecc: collections.Counter = dataclasses.field(
        default_factory=collections.Counter)


class HealthMonitor:
    """Health events and probes of the watched GPUs, and their verdicts.

    Thread-safe; `poll_once` is for tests that run no thread (do not mix
    it with a running thread).
    """

    def __init__(self, backend, clock=time.monotonic, recovery_after=300.0,
                 wait_ms=1000, ignored_xids=(), backoff=(0.5, 30.0),
                 reset_xids=()):
        self.backend = backend
        self.clock = clock
        self.recovery_after = recovery_after
        self.wait_ms = wait_ms
        self.ignored_xids = frozenset(ignored_xids)
        self.reset_xids = frozenset(reset_xids)
        self.backoff = backoff
        self._lock = threading.RLock()       # the per-GPU state
        self._gpus = {}
        self._sync_lock = threading.Lock()   # the event set registrations
        self._watched = set()
        self._registered = set()
        self._need_set = True
        self._stop = threading.Event()
        self._thread = None
        self._trouble = None                 # the last error logged

    # Thread ---------------------------------------------------------------

    def start(self):
        """Run the event loop in a daemon thread (once)."""
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._stop = threading.Event()
            self._thread = threading.Thread(
                target=self._run, name='nvidia-health', daemon=True)
            self._thread.start()

    def stop(self, timeout=None):
        """Stop the loop; returns once it ended (within one wait)."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout if timeout is not None
                        else self.wait_ms / 1000.0 + 1.0)

    @property
    def running(self):
        return self._thread is not None and self._thread.is_alive()

    def _run(self):
        delay = 0.0
        while not self._stop.is_set():
            try:
                self.poll_once(self.wait_ms)
            except Exception as e:  # the loop must outlive any NVML fault
                delay = min(max(delay * 2, self.backoff[0]), self.backoff[1])
                self._complain(e)
                self._stop.wait(delay)
            else:
                delay = 0.0
                if self._trouble is not None:
                    LOG.info('GPU health events flow again')
                    self._trouble = None

    def _complain(self, error):
        """Log a fault once, not once per retry."""
        text = '%s: %s' % (type(error).__name__, error)
        if text != self._trouble:
            LOG.warning('GPU health watch failed, retrying with back-off: '
                        '%s', text)
            self._trouble = text

    # Events ---------------------------------------------------------------

    def watch(self, uuids):
        """Register health events of these GPUs (new ones only); an NVML
        failure is logged and retried by the loop, never raised.
        """
        with self._lock:
            for uuid in uuids:
                self._gpu(uuid)
        with self._sync_lock:
            self._watched.update(uuids)
        try:
            self._sync()
        except NvmlError as e:
            self._complain(e)

    def poll_once(self, timeout_ms=0):
        """Register what is missing, wait once, record; the event or
        None.
        """
        self._sync()
        try:
            event = self.backend.wait_event(timeout_ms)
        except NvmlError as e:
            if e.kind == 'Uninitialized':   # closed or refreshed: a new set
                self._renew()
                return None
            if e.kind == 'GpuIsLost':
                self._find_lost()
                return None
            raise
        if event is not None:
            self._record(event)
        return event

    def _renew(self):
        with self._sync_lock:
            self._need_set = True

    def _resync(self):
        """A GPU is back: register it on a fresh set now, not at the next
        wait, so its next event is not missed (may sit out one wait).
        """
        self._renew()
        try:
            self._sync()
        except NvmlError as e:
            self._complain(e)

    def _sync(self):
        """A new event set when needed; register watched GPUs that are
        not Lost and not registered on the current set.
        """
        with self._sync_lock:
            if self._need_set:
                self.backend.create_event_set()
                self._need_set = False
                self._registered.clear()
            for uuid in sorted(self._watched - self._registered):
                if self._is_lost(uuid):
                    continue
                if not self._register(uuid):
                    break

    def _register(self, uuid):
        """False when the set itself is gone (stop registering)."""
        try:
            mask = self.backend.register_events(uuid)
        except NvmlError as e:
            if e.kind == 'Uninitialized':
                self._need_set = True
                return False
            if e.kind == 'GpuIsLost':
                self._mark_lost(uuid, 'GpuIsLost', str(e))
            else:
                LOG.debug('No health events for GPU %s: %s', uuid, e)
            return True
        self._registered.add(uuid)
        with self._lock:
            self._gpu(uuid).mask = mask
        return True

    def _find_lost(self):
        """The wait says a registered GPU is lost, not which: probe them,
        and start a new set without the lost ones.
        """
        with self._sync_lock:
            uuids = sorted(self._registered)
            self._need_set = True
        for uuid in uuids:
            self.observe(uuid, self.backend.health_probe(uuid))
        if not any(self._is_lost(uuid) for uuid in uuids):
            raise NvmlError('GpuIsLost', 'the event wait reports a lost GPU '
                            'but every probe succeeds')

    def _record(self, event):
        uuid = event.get('uuid')
        if uuid is None:
            LOG.warning('GPU health event from an unknown GPU: %s', event)
            return
        with self._lock:
            gpu = self._gpu(uuid)
            if event['type'] == 'xid':
                self._on_xid(uuid, gpu, event)
            elif event['type'] == 'ecc_dbe':
                gpu.ecc['double_bit'] += 1
                self._fail(uuid, gpu, 'DoubleBitEcc',
                           'double-bit (uncorrectable) ECC error%s'
                           % _where(event), needs_reset=True)
            elif event['type'] == 'ecc_sbe':
                gpu.ecc['single_bit'] += 1

    def _on_xid(self, uuid, gpu, event):
        xid = event['xid']
        gpu.xids[xid] += 1
        kind = classify_xid(xid, self.ignored_xids)
        text = describe_xid(xid) + _where(event)
        if kind == 'lost':
            self._mark_lost(uuid, 'Xid%d' % xid, text + ': the GPU is '
                            'unreachable until it is reset')
        elif kind == 'fatal':
            if event.get('gi_id') is not None:
                text += ('; a fatal error in one MIG instance fails the '
                         'whole GPU (memory, engines and bus are shared)')
            needs_reset = xid in self.reset_xids
            if needs_reset:
                text += ('; the XID catalog says reset the GPU: it stays '
                         'Failed until an admin resets it')
            self._fail(uuid, gpu, 'Xid%d' % xid, text, needs_reset)
        else:
            LOG.info('GPU %s: %s, %s: the GPU stays usable', uuid, text,
                     kind)

    def _fail(self, uuid, gpu, reason, message, needs_reset=False):
        LOG.warning('GPU %s failed: %s', uuid, message)
        if gpu.fatal is not None and gpu.needs_reset and not needs_reset:
            return      # a later, lesser error must not shorten the wait
        gpu.fatal = (reason, message, self.clock())
        gpu.needs_reset = needs_reset

    def _mark_lost(self, uuid, reason, message):
        with self._lock:
            gpu = self._gpu(uuid)
            if gpu.lost is None:
                LOG.warning('GPU %s is lost: %s', uuid, message)
                gpu.lost = (reason, message)

    # Probes and verdicts ----------------------------------------------------

    def observe(self, uuid, probe):
        """Feed one backend.health_probe() result (each discovery pass)."""
        now = self.clock()
        with self._lock:
            gpu = self._gpu(uuid)
            self._ecc_fallback(uuid, gpu, probe)
            gpu.probe, gpu.probe_at = dict(probe), now
            back = (gpu.lost is not None and not probe.get('lost')
                    and probe.get('error') is None)
            if back:
                LOG.info('GPU %s answers again', uuid)
                gpu.lost = None
            self._expire(uuid, gpu, now)
        if probe.get('lost'):
            self._mark_lost(uuid, 'GpuIsLost', 'NVML answers GpuIsLost: '
                            'the GPU is unreachable until it is reset')
        if back:
            self._resync()

    def _ecc_fallback(self, uuid, gpu, probe):
        """Without double-bit ECC events, a rising volatile uncorrected
        counter is the same news.
        """
        if gpu.mask is not None and gpu.mask & _DBE:
            return
        before = (gpu.probe or {}).get('ecc_volatile_uncorrected')
        now = probe.get('ecc_volatile_uncorrected')
        if before is not None and now is not None and now > before:
            self._fail(uuid, gpu, 'DoubleBitEcc', '%d new uncorrectable '
                       'ECC error(s)' % (now - before), needs_reset=True)

    def _expire(self, uuid, gpu, now):
        """Forget a fatal event after `recovery_after` quiet seconds, if
        a probe since then is healthy.
        """
        if gpu.fatal is None or gpu.needs_reset or not self._healthy(gpu):
            return
        at = gpu.fatal[2]
        if now - at >= self.recovery_after and gpu.probe_at >= at:
            LOG.info('GPU %s recovered: no fatal error for %ds', uuid,
                     self.recovery_after)
            gpu.fatal = None

    @staticmethod
    def _healthy(gpu):
        p = gpu.probe
        return p is not None and not (
            p.get('lost') or p.get('error') or p.get('remap_failure')
            or p.get('reset_required'))

    def verdict(self, uuid):
        """(phase, reason, message): phase 'Ready', 'Failed' or 'Lost'."""
        with self._lock:
            gpu = self._gpus.get(uuid)
            if gpu is None:
                return READY
            self._expire(uuid, gpu, self.clock())
            return self._judge(gpu)

    @staticmethod
    def _judge(gpu):
        if gpu.lost is not None:
            return ('Lost',) + gpu.lost
        probe = gpu.probe or {}
        if probe.get('remap_failure'):
            return ('Failed', 'RowRemapFailure', 'row remapping failed: no '
                    'spare memory rows left (an RMA criterion)')
        if probe.get('reset_required'):
            return ('Failed', 'ResetRequired', 'NVML says the GPU needs a '
                    'reset: %s' % probe.get('error'))
        if gpu.fatal is not None:
            return ('Failed',) + gpu.fatal[:2]
        if probe.get('remap_pending'):
            return ('Failed', 'RowRemapPending', 'a memory row remap is '
                    'pending; it takes effect at the next GPU reset')
        return READY

    def reset(self, uuid):
        """The GPU was reset: forget its faults now (counters stay)."""
        with self._lock:
            gpu = self._gpu(uuid)
            gpu.lost = gpu.fatal = gpu.probe = gpu.probe_at = None
            gpu.needs_reset = False
        LOG.info('GPU %s health reset', uuid)
        self._resync()

    # Metrics ----------------------------------------------------------------

    def xid_counts(self):
        """{uuid: {xid: count}} since the agent started."""
        with self._lock:
            return {u: dict(g.xids) for u, g in self._gpus.items()}

    def ecc_counts(self):
        """{uuid: {double_bit, single_bit: event counts,
        volatile_uncorrected: the last probe's counter or None}}.
        """
        with self._lock:
            return {u: {'double_bit': g.ecc['double_bit'],
                        'single_bit': g.ecc['single_bit'],
                        'volatile_uncorrected': (g.probe or {}).get(
                            'ecc_volatile_uncorrected')}
                    for u, g in self._gpus.items()}

    # Helpers ----------------------------------------------------------------

    def _gpu(self, uuid):
        gpu = self._gpus.get(uuid)
        if gpu is None:
            gpu = self._gpus[uuid] = _Gpu()
        return gpu

    def _is_lost(self, uuid):
        with self._lock:
            gpu = self._gpus.get(uuid)
            return gpu is not None and gpu.lost is not None
