# SPDX-License-Identifier: Apache-2.0
"""oslo.messaging plumbing: one transport per process, threading executor.

`inproc://` (cyborg.rpc.inproc, in-process) in the embedded stack,
`rabbit://` when distributed.
"""

import threading

from oslo_log import log
import oslo_messaging as messaging
from oslo_serialization import jsonutils

from cyborg.common import plain_data
from cyborg.conf import CONF
from cyborg import context as cyborg_context

CONDUCTOR_TOPIC = 'cyborg-conductor'
AGENT_TOPIC = 'cyborg-agent'
EXCHANGE = 'cyborg'

# A cast gives up after this many reconnection attempts (1 s, then 3 s
# with the rabbit driver's back-off) rather than the driver's default of
# retrying forever, which would hold an API request while the broker is
# down.
CAST_RETRIES = 2

LOG = log.getLogger(__name__)
_LOCK = threading.Lock()
_TRANSPORT = None


def to_primitive(value):
    """jsonutils.to_primitive(value, convert_instances=True), with plain
    dicts, lists, tuples and scalars (nearly all an RPC argument holds)
    copied here and only other values handed to oslo: its generic checks
    per value made serializing an agent's report or a batch of handles
    cost more CPU than the call. A copy still, so that with the in-process
    transport neither side sees the other's later changes.
    """
    # Dicts, lists and tuples keep oslo's depth level, so anything else
    # converts as it would have at the top.
    return plain_data.copy(value, _oslo_primitive, tuples=list)


def _oslo_primitive(value):
    return jsonutils.to_primitive(value, convert_instances=True)


class ContextSerializer(messaging.NoOpSerializer):
    """Carry our RequestContext across RPC as a plain dict."""

    def serialize_entity(self, ctxt, entity):
        return to_primitive(entity)

    def serialize_context(self, ctxt):
        return ctxt.to_dict()

    def deserialize_context(self, ctxt):
        return cyborg_context.RequestContext.from_dict(ctxt)


def quick_stop_defaults(conf=CONF):
    """Defaults for a service that must stop within seconds (the
    conductor, the agent), set before their config files are read.

    The rabbit driver's listeners block in the socket for up to
    heartbeat_timeout_threshold / heartbeat_rate / 2 seconds (10 s with
    the library's 60 and 3) and notice a stop only then: a service took
    5 s to stop its RPC server. At 30 checks per threshold they notice
    within 1 s; an idle connection then sends its 8-byte heartbeat frame
    every 2 s instead of every 20 s. The API keeps the library's default:
    its workers' stop is the web server's business, and its heartbeat
    thread holds a connection while it reconnects to a lost broker, which
    a faster check would only make more frequent.
    """
    conf.set_default('heartbeat_rate', 30, group='oslo_messaging_rabbit')


def get_transport():
    global _TRANSPORT
    with _LOCK:
        if _TRANSPORT is None:
            messaging.set_transport_defaults(EXCHANGE)
            _TRANSPORT = messaging.get_rpc_transport(CONF)
        return _TRANSPORT


def cleanup():
    global _TRANSPORT
    with _LOCK:
        if _TRANSPORT is not None:
            _TRANSPORT.cleanup()
        _TRANSPORT = None


def get_server(topic, endpoints, server=None):
    target = messaging.Target(topic=topic, server=server or CONF.host)
    return messaging.get_rpc_server(
        get_transport(), target, endpoints, executor='threading',
        serializer=ContextSerializer(),
        access_policy=messaging.DefaultRPCAccessPolicy)


def get_client(topic, version, server=None, timeout=None, version_cap=None):
    """An RPC client; version_cap (e.g. from [upgrade_levels]) is the
    highest version its messages may carry, for servers not yet
    upgraded.
    """
    target = messaging.Target(topic=topic, server=server, version=version)
    return messaging.get_rpc_client(get_transport(), target,
                                    serializer=ContextSerializer(),
                                    timeout=timeout, version_cap=version_cap)


def best_effort_cast(client, context, method, **kwargs):
    """Cast through a prepared client with bounded retries; a message the
    broker cannot take is logged and dropped (returns False), for casts
    whose work something else re-drives (the conductor's sweep, the
    agent's next report).
    """
    try:
        client.prepare(retry=CAST_RETRIES).cast(context, method, **kwargs)
    except Exception as e:
        # MessageDeliveryFailure, or the driver's own error (kombu's
        # OperationalError) when the broker never answered at all.
        LOG.warning('Could not send %s, the message bus is unreachable '
                    '(%s: %s); it will be re-driven', method,
                    type(e).__name__, e)
        return False
    return True
