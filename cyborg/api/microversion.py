# SPDX-License-Identifier: Apache-2.0
"""Accelerator API microversions (2.0–2.6), negotiated per request.

History: 2.1 `/project_id` in a bind patch; 2.2 device profile GET by name;
2.3 device `status`; 2.4 (ours, beyond Cyborg) device lifecycle: `phase`,
`driver`, `mode`, `management_state`, `conditions`, and the admin actions
exclude, include and reclaim; 2.5 (ours) the ARQ's `state_reason`; 2.6
(ours) the device `reset` action. No header means 2.0, as in Cyborg.
"""

import microversion_parse
import webob.request

from cyborg.common import exception

SERVICE_TYPE = 'accelerator'
MIN_VERSION = (2, 0)
MAX_VERSION = (2, 6)
ENVIRON_KEY = 'cyborg.microversion'
HEADER = 'OpenStack-API-Version'
_RANGE = '[%d.%d, %d.%d]' % (MIN_VERSION + MAX_VERSION)


def fmt(version):
    return '%d.%d' % version


def from_environ(environ):
    """parse() for a WSGI environ; most requests send no header."""
    if 'HTTP_OPENSTACK_API_VERSION' not in environ:
        return MIN_VERSION
    return parse(webob.request.EnvironHeaders(environ))


def parse(headers):
    """Return the (major, minor) a request asks for, or raise 406."""
    try:
        value = microversion_parse.get_version(headers, SERVICE_TYPE)
    except ValueError:
        value = None
    if value is None:
        raw = (headers.get(HEADER) or '').strip()
        if not raw or ' ' in raw:
            # Absent, or addressed to other services only.
            return MIN_VERSION
        # A bare "2.1" (no service type) is accepted, as Cyborg does.
        value = raw
    if value == 'latest':
        return MAX_VERSION
    try:
        major, minor = (int(p) for p in value.split('.'))
    except ValueError:
        raise exception.NotAcceptable(
            'Invalid value for OpenStack-API-Version header')
    if major != MIN_VERSION[0]:
        raise exception.NotAcceptable(
            'Mutually exclusive versions requested. Version %s requested but '
            'not supported by this service. The supported version range is: '
            '%s.' % (exception.excerpt(value), _RANGE))
    if not MIN_VERSION <= (major, minor) <= MAX_VERSION:
        raise exception.NotAcceptable(
            'Version %s was requested but the minor version is not supported '
            'by this service. The supported version range is: %s.'
            % (exception.excerpt(value), _RANGE))
    return (major, minor)


def response_headers(version):
    return [('OpenStack-API-Minimum-Version', fmt(MIN_VERSION)),
            ('OpenStack-API-Maximum-Version', fmt(MAX_VERSION)),
            (HEADER, '%s %s' % (SERVICE_TYPE, fmt(version))),
            ('Vary', HEADER)]


def require(request, version, what):
    """406 unless the request's microversion is at least `version`."""
    if request.environ[ENVIRON_KEY] < version:
        raise exception.NotAcceptable(
            'The minimal required API version should be %s for %s'
            % (fmt(version), what))
