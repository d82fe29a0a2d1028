# SPDX-License-Identifier: Apache-2.0
"""The workloads, each a function of a Context returning result dicts.

Paths and bodies are what Nova and the cyborg client send to a Cyborg v2
endpoint; nothing here depends on which implementation answers.
"""

import itertools
import random
import threading
import time
import uuid

from cyborg_bench import runner

GPU_GROUPS = [{'resources:CUSTOM_ACCELERATOR_GPU': '1',
               'trait:CUSTOM_GPU_NVIDIA': 'required'}]
ARQ_PROFILE = 'cyborg-bench-arq'


def chosen(text, known):
    """The workload names of a comma-separated `text`, each one of
    `known`; SystemExit naming the first that is not.
    """
    names = [name for name in text.split(',') if name]
    for name in names:
        if name not in known:
            raise SystemExit('unknown workload %s (one of %s)'
                             % (name, ', '.join(known)))
    return names


class NotRun(Exception):
    """The workload cannot run against this endpoint; the text says why."""


class Context:
    """What the workloads share: options, the endpoint, its helpers."""

    def __init__(self, endpoint, opts, seeder=None, receiver=None, log=None):
        self.endpoint = endpoint
        self.opts = opts
        self.seeder = seeder
        self.receiver = receiver
        self.log = log or (lambda msg: None)
        self.run_id = uuid.uuid4().hex[:8]
        self.created_profiles = []
        self.serial = itertools.count()  # unique names across measurements
        self.lock = threading.Lock()
        self._admin = None
        self._profile = None
        self._bind_targets = None

    @property
    def admin(self):
        if self._admin is None:
            self._admin = self.endpoint.client()
        return self._admin

    def measure(self, name, op, count, concurrency, warmup=None, **extra):
        o = self.opts
        result = runner.run(
            self.endpoint, op, count, concurrency, o.time_limit,
            warmup=o.warmup if warmup is None else warmup)
        out = {'workload': name}
        out.update(extra)
        out.update(result)
        self.log('%-10s %-8s c=%-3d ok=%-5d err=%-3d %8.1f/s p50 %s p99 %s'
                 % (name, extra.get('rows', ''), concurrency, result['ok'],
                    result['errors'], result['ops_per_s'],
                    result.get('p50_ms'), result.get('p99_ms')))
        return out

    def levels(self, name, op, **extra):
        """`op` measured at every --concurrency level."""
        return [self.measure(name, op, self.opts.requests, c, **extra)
                for c in self.opts.concurrency]

    def created(self):
        """The profiles dp-create made, for dp-get and dp-delete."""
        if not self.created_profiles:
            raise NotRun('needs profiles from dp-create first')
        return self.created_profiles

    def arq_profile(self):
        """Name of the profile the ARQ workloads use (created once)."""
        if self._profile is None:
            name = '%s-%s' % (ARQ_PROFILE, self.run_id)
            self.admin.call('POST', '/v2/device_profiles',
                            [{'name': name, 'groups': self.opts.groups}],
                            expect=201)
            self._profile = name
        return self._profile

    def bind_targets(self):
        """[(hostname, rp_uuid)] of every deployable with attach handles,
        one entry per handle, from the deployables and devices APIs.
        """
        if self._bind_targets is None:
            devices = self.admin.call('GET', '/v2/devices')['devices']
            hosts = {d['hostname'] for d in devices}
            if len(hosts) != 1:
                # Deployables name their device by database id only.
                raise NotRun('bind needs the devices on one host, found %s'
                             % sorted(hosts))
            [host] = hosts
            deps = self.admin.call('GET', '/v2/deployables')['deployables']
            targets = []
            for d in sorted(deps, key=lambda d: d['name']):
                if d.get('rp_uuid'):
                    targets += [(host, d['rp_uuid'])] * d['num_accelerators']
            # Interleave the devices so neighbours in time use different
            # deployables.
            self._bind_targets = targets[0::2] + targets[1::2]
        return self._bind_targets


def _created_uuid(body):
    """The uuid a POST /v2/device_profiles answered with (an object, or
    a one-element list/collection, depending on the implementation).
    """
    if isinstance(body, dict) and 'device_profiles' in body:
        body = body['device_profiles']
    if isinstance(body, list):
        body = body[0]
    return body['uuid']


def noop(ctx):
    """GET / of the endpoint: for cyborg.wsgi.floor the web stack alone;
    for an API its version document.
    """
    def op(cl, i):
        cl.call('GET', '/')
    return ctx.levels('noop', op)


def dp_create(ctx):
    def op(cl, i):
        body = cl.call('POST', '/v2/device_profiles', [{
            'name': 'bench-%s-%d' % (ctx.run_id, next(ctx.serial)),
            'groups': ctx.opts.groups,
            'description': 'cyborg-bench profile'}], expect=201)
        if i >= 0:
            with ctx.lock:
                ctx.created_profiles.append(_created_uuid(body))
    return ctx.levels('dp-create', op)


def dp_get(ctx):
    made = ctx.created()

    def op(cl, i):
        want = made[i % len(made)]
        body = cl.call('GET', '/v2/device_profiles/%s' % want)
        body = body.get('device_profile', body)  # wrapped or bare
        if body.get('uuid') != want:
            raise ValueError('asked for %s, got %s' % (want, body))
    return ctx.levels('dp-get', op)


def dp_delete(ctx):
    made = ctx.created()
    results = []
    per_level = max(1, len(made) // len(ctx.opts.concurrency))
    for n, c in enumerate(ctx.opts.concurrency):
        batch = made[n * per_level:(n + 1) * per_level]

        def op(cl, i, batch=batch):
            cl.call('DELETE', '/v2/device_profiles/%s' % batch[i],
                    expect=204)
        results.append(ctx.measure('dp-delete', op, len(batch), c, warmup=0))
    del made[:]
    return results


def dp_list(ctx):
    """GET /v2/device_profiles with exactly --dp-list-rows profiles."""
    want = ctx.opts.dp_list_rows
    for _ in range(20):
        # An API that pages answers at most a page: trim until it fits.
        have = ctx.admin.call('GET', '/v2/device_profiles')[
            'device_profiles']
        if len(have) == want:
            break
        _resize_profiles(ctx, have, want)

    def op(cl, i):
        got = len(cl.call('GET', '/v2/device_profiles')['device_profiles'])
        if got != want:
            raise ValueError('listed %d profiles, expected %d' % (got, want))
    return ctx.levels('dp-list', op, rows=want)


def _resize_profiles(ctx, have, want):
    """Create or delete profiles so `have` becomes `want` long, sparing
    the ARQ profile and, while others remain, dp-create's.
    """
    for i in range(len(have), want):
        ctx.admin.call('POST', '/v2/device_profiles', [{
            'name': 'bench-list-%s-%d' % (ctx.run_id, next(ctx.serial)),
            'groups': ctx.opts.groups}], expect=201)
    spare = set(ctx.created_profiles)
    extra = sorted((p for p in have if p['name'] != ctx._profile),
                   key=lambda p: p['uuid'] in spare)[:max(0, len(have)
                                                          - want)]
    gone = {p['uuid'] for p in extra}
    ctx.created_profiles[:] = [u for u in ctx.created_profiles
                               if u not in gone]
    for p in extra:
        ctx.admin.call('DELETE', '/v2/device_profiles/%s' % p['uuid'],
                       expect=204)


def arq_create(ctx):
    name = ctx.arq_profile()
    made = []

    def op(cl, i):
        body = cl.call('POST', '/v2/accelerator_requests',
                       {'device_profile_name': name}, expect=201)
        with ctx.lock:
            made.extend(a['uuid'] for a in body['arqs'])
    results = ctx.levels('arq-create', op)
    for start in range(0, len(made), 50):
        ctx.admin.call('DELETE', '/v2/accelerator_requests?arqs=%s'
                       % ','.join(made[start:start + 50]), expect=204)
    return results


def _seeded_sizes(ctx):
    """Yield (size, instances) as the ARQ table is grown through the
    --sizes, by cloning an ARQ the API created.
    """
    if ctx.seeder is None:
        raise NotRun('needs --seed-db to fill the ARQ table')
    body = ctx.admin.call('POST', '/v2/accelerator_requests',
                          {'device_profile_name': ctx.arq_profile()},
                          expect=201)
    template = ctx.seeder.row(ctx.seeder.arqs, body['arqs'][0]['uuid'])
    ctx.seeder.clear_arqs()
    instances = []
    for size in ctx.opts.sizes:
        t0 = time.perf_counter()
        ctx.seeder.fill_arqs(template, size, instances)
        ctx.log('ARQ table at %d rows (%.1fs to fill)'
                % (size, time.perf_counter() - t0))
        yield size, instances


def lookup_and_list(ctx, names):
    """`lookup` (GET ?instance=) and `arq-list` (GET, every ARQ) at each
    table size; one fill serves both.
    """
    results = []
    rng = random.Random(7)
    for size, instances in _seeded_sizes(ctx):
        if 'lookup' in names:
            picks = [rng.choice(instances) for _ in range(4096)]

            def op(cl, i, picks=picks):
                inst = picks[i % len(picks)]
                arqs = cl.call('GET', '/v2/accelerator_requests?instance=%s'
                               % inst)['arqs']
                if not arqs or any(a['instance_uuid'] != inst
                                   for a in arqs):
                    raise ValueError('lookup of %s answered %d ARQ(s)'
                                     % (inst, len(arqs)))
            for c in ctx.opts.concurrency:
                # A short warm-up: on a service that reads every row, one
                # request can take minutes.
                results.append(ctx.measure(
                    'lookup', op, ctx.opts.requests, c,
                    warmup=min(ctx.opts.warmup, 2), rows=size))
        if 'arq-list' in names:
            listed = []

            def op(cl, i):
                # One GET, no parameters: the reference answers every row,
                # an endpoint with paging its first page.
                got = len(cl.call('GET', '/v2/accelerator_requests')['arqs'])
                if not got:
                    raise ValueError('listed no ARQ of %d' % size)
                listed.append(got)
            results.append(ctx.measure(
                'arq-list', op, max(1, ctx.opts.requests // 10), 1,
                warmup=int(size == ctx.opts.sizes[0]), rows=size))
            results[-1]['listed'] = max(listed) if listed else None
    ctx.seeder.clear_arqs()
    return results


def boot(ctx, bind_only=False):
    """Nova's boot flow per operation: create the instance's ARQs, bind
    them (PATCH) and wait for accelerator-request-bound when a bind target
    and event receiver are given, get them by instance, delete them by
    instance. Without bind: create, get by uuid, delete by uuid.
    """
    name = ctx.arq_profile()
    can_bind = ctx.receiver is not None
    if not can_bind:
        if bind_only:
            raise NotRun(ctx.opts.no_bind_reason or
                         'needs --receiver-port and a service whose [nova] '
                         'points at it')
        return ctx.levels('boot', _flow_unbound(name), bound=False)
    targets = ctx.bind_targets()
    if not targets:
        raise NotRun('the endpoint lists no deployable with an rp_uuid')
    op = _flow_bound(ctx, name, targets)
    levels = [1] if bind_only else ctx.opts.concurrency
    return [ctx.measure('bind' if bind_only else 'boot', op,
                        ctx.opts.requests, min(c, len(targets)), bound=True)
            for c in levels]


def _flow_unbound(name):
    def op(cl, i):
        arqs = cl.call('POST', '/v2/accelerator_requests',
                       {'device_profile_name': name}, expect=201)['arqs']
        for a in arqs:
            cl.call('GET', '/v2/accelerator_requests/%s' % a['uuid'])
        cl.call('DELETE', '/v2/accelerator_requests?arqs=%s'
                % ','.join(a['uuid'] for a in arqs), expect=204)
    return op


def _flow_bound(ctx, name, targets):
    timeout = ctx.opts.event_timeout

    def op(cl, i):
        instance = str(uuid.uuid4())
        host, rp = targets[i % len(targets)]
        arqs = cl.call('POST', '/v2/accelerator_requests',
                       {'device_profile_name': name}, expect=201)['arqs']
        patch = {a['uuid']: [
            {'path': '/hostname', 'op': 'add', 'value': host},
            {'path': '/device_rp_uuid', 'op': 'add', 'value': rp},
            {'path': '/instance_uuid', 'op': 'add', 'value': instance}]
            for a in arqs}
        sent = time.perf_counter()
        cl.call('PATCH', '/v2/accelerator_requests', patch, expect=202)
        answered = time.perf_counter()
        last = sent
        for a in arqs:
            arrived, event = ctx.receiver.take(a['uuid'], timeout)
            if event.get('status') != 'completed':
                raise ValueError('bind of %s: %s' % (a['uuid'], event))
            last = max(last, arrived)
        got = cl.call('GET', '/v2/accelerator_requests?instance=%s'
                      % instance)['arqs']
        if len(got) != len(arqs) or any(a['state'] != 'Bound' for a in got):
            raise ValueError('after the event: %s' % got)
        cl.call('DELETE', '/v2/accelerator_requests?instance=%s' % instance,
                expect=204)
        return {'patch': answered - sent, 'event': last - sent}
    return op
