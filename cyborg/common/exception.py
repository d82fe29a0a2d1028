# SPDX-License-Identifier: Apache-2.0
"""Domain exceptions. Each carries the HTTP status the API answers with.

Deliberately unlike Cyborg, no client mistake maps to 500: every class here
that a request can trigger is a 4xx.
"""


class CyborgException(Exception):
    code = 500
    msg_fmt = 'An unknown error occurred.'

    def __init__(self, message=None, **kwargs):
        if message is None:
            message = self.msg_fmt % kwargs
        self.message = message
        super().__init__(message)


class Invalid(CyborgException):
    code = 400
    msg_fmt = 'Invalid input: %(reason)s'


class PatchError(Invalid):
    msg_fmt = "Couldn't apply patch. Reason: %(reason)s"


class Forbidden(CyborgException):
    code = 403
    msg_fmt = 'Forbidden.'


class PolicyNotAuthorized(Forbidden):
    msg_fmt = 'Access was denied to the following resource: %(action)s'


class NotFound(CyborgException):
    code = 404
    msg_fmt = '%(resource)s not found %(msg)s'


class NotAcceptable(CyborgException):
    code = 406
    msg_fmt = 'Request not acceptable. %(reason)s'


class Conflict(CyborgException):
    code = 409
    msg_fmt = 'Conflict: %(reason)s'


class DuplicateDeviceProfileName(Conflict):
    msg_fmt = 'A device_profile with name %(name)s already exists.'


class DeviceProfileAlreadyExists(Conflict):
    msg_fmt = 'DeviceProfile with uuid %(uuid)s already exists.'


class DeviceProfileInUse(Conflict):
    msg_fmt = ('Device profile %(name)s is used by %(count)d accelerator '
               'request(s); delete them first.')


class ARQBadState(Conflict):
    msg_fmt = ('Bad state: %(state)s for ARQ: %(uuid)s. Expected state(s): '
               '%(expected)s')


class NotReclaimable(Conflict):
    msg_fmt = ('Device %(uuid)s is %(state)s; only an Orphaned device can '
               'be reclaimed (or one whose orphan wait is running, which '
               'is held until it ends).')


class NotResettable(Conflict):
    msg_fmt = ('Device %(uuid)s is %(state)s; only a Failed or Lost device '
               'that no binding holds can be reset.')


class Locked(CyborgException):
    code = 423
    msg_fmt = ('Accelerator requests of instance %(instance)s are not '
               'resolved yet.')


class ServiceUnavailable(CyborgException):
    code = 503
    msg_fmt = 'Service unavailable: %(reason)s'


# The most characters of a client's value an error message quotes.
EXCERPT_LENGTH = 100


def excerpt(value, limit=EXCERPT_LENGTH):
    """`value` (str() of it) for an error message: at most `limit`
    characters of it, so that a huge input is never echoed back whole.
    """
    text = value if isinstance(value, str) else str(value)
    if len(text) <= limit:
        return text
    return '%s... (%d characters)' % (text[:limit], len(text))


def not_found(resource, **keys):
    """NotFound with Cyborg's `<Resource> not found with k=v` message."""
    detail = ', '.join('%s=%s' % (k, excerpt(v)) for k, v in keys.items())
    return NotFound(resource=resource, msg='with ' + detail)
