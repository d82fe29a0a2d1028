# SPDX-License-Identifier: Apache-2.0
"""Nova's exceptions for the accelerator paths: same names, same messages."""


class NovaException(Exception):
    """Formats msg_fmt with the keyword arguments, as Nova does."""

    msg_fmt = 'An unknown exception occurred.'

    def __init__(self, message=None, **kwargs):
        self.kwargs = kwargs
        if not message:
            message = self.msg_fmt % kwargs
        self.message = message
        super().__init__(message)


class DeviceProfileError(NovaException):
    msg_fmt = 'Device profile name %(name)s: %(msg)s'


class AcceleratorRequestOpFailed(NovaException):
    msg_fmt = 'Failed to %(op)s accelerator requests: %(msg)s'


class AcceleratorRequestBindingFailed(NovaException):
    msg_fmt = 'Failed to bind accelerator requests: %(msg)s'

    def __init__(self, message=None, arqs=None, **kwargs):
        super().__init__(message=message, **kwargs)
        self.arqs = list(arqs or [])


class BuildAbortException(NovaException):
    msg_fmt = 'Build of instance %(instance_uuid)s aborted: %(reason)s'


class NoValidHost(NovaException):
    msg_fmt = 'No valid host was found. %(reason)s'


class InstanceEventFailed(NovaException):
    """An awaited event came with a status other than `completed`."""

    msg_fmt = 'Instance event failed'

    def __init__(self, event_name=None, **kwargs):
        super().__init__(**kwargs)
        self.event_name = event_name


class InstanceEventTimeout(Exception):
    """Not every awaited event arrived before the deadline."""


class RequestGroupSuffixConflict(NovaException):
    msg_fmt = 'Duplicate request group suffix %(suffix)s.'


class AttachHandleNotWirable(NovaException):
    """Bound ARQs whose attach handles cannot become guest devices.

    Nova logs and drops such ARQs (the guest boots without them); here the
    build fails instead, naming every ARQ and why.
    """

    msg_fmt = ('Cannot give the guest its accelerators: %(reasons)s')

    def __init__(self, problems):
        # problems: [(arq uuid, attach handle type, reason)]
        self.problems = list(problems)
        super().__init__(reasons='; '.join(
            'ARQ %s (attach handle type %s): %s' % (arq, handle_type, reason)
            for arq, handle_type, reason in self.problems))


class MdevCreationFailed(NovaException):
    msg_fmt = ('Cannot create mdev %(uuid)s of type %(mdev_type)s on '
               '%(parent)s: %(reason)s')


class MdevRemovalFailed(NovaException):
    msg_fmt = 'Cannot remove mdev %(uuid)s from %(parent)s: %(reason)s'
