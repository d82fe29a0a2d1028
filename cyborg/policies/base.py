# SPDX-License-Identifier: Apache-2.0
"""Building blocks the per-resource defaults are made of.

OpenStack's secure-RBAC personas, as Nova and Placement define them:
project reader, project member, admin, and the service role of another
service (Nova) on its token or on the service token it sends with the
user's. Every operation is for project-scoped tokens (`scope_types =
['project']`, which oslo.policy enforces: a system-scoped token is
refused), and there are no deprecated rules to fall back to, so
`[oslo_policy] enforce_new_defaults` (true by default) changes nothing.

The target of a check is the caller's own project (as in Cyborg), so
`project_id:%(project_id)s` asks only that the token be project-scoped.
Ownership is enforced below the policy: every ARQ query is scoped to the
caller's project unless the caller is an admin, and another project's ARQ
answers 404 exactly as a missing one (tests/security/test_isolation.py).
"""

from oslo_policy import policy

ADMIN = 'rule:admin_api'
SERVICE = 'rule:service_api'
PROJECT_READER = 'rule:project_reader_api'
PROJECT_MEMBER = 'rule:project_member_api'
ADMIN_OR_SERVICE = ADMIN + ' or ' + SERVICE
ADMIN_OR_READER = ADMIN + ' or ' + PROJECT_READER
ADMIN_OR_MEMBER_OR_SERVICE = ADMIN + ' or ' + PROJECT_MEMBER + ' or ' + SERVICE
ADMIN_OR_READER_OR_SERVICE = ADMIN + ' or ' + PROJECT_READER + ' or ' + SERVICE

rules = [
    policy.RuleDefault('admin_api', 'role:admin',
                       description='Cloud administrator.'),
    policy.RuleDefault('service_api', 'role:service or service_roles:service',
                       description='Another OpenStack service (Nova), '
                                   'identified by the service role on its '
                                   'token or its service token.'),
    policy.RuleDefault('project_reader_api',
                       'role:reader and project_id:%(project_id)s',
                       description='A reader of the project owning the '
                                   'resource.'),
    policy.RuleDefault('project_member_api',
                       'role:member and project_id:%(project_id)s',
                       description='A member of the project owning the '
                                   'resource.'),
]


# The token scope every operation is for.
SCOPE_TYPES = ['project']


def operations(resource, specs):
    """DocumentedRuleDefaults for `cyborg:<resource>:<action>`."""
    return [
        policy.DocumentedRuleDefault(
            name='cyborg:%s:%s' % (resource, action), check_str=check,
            description=desc, scope_types=SCOPE_TYPES,
            operations=[{'method': m, 'path': p} for m, p in ops])
        for action, check, desc, ops in specs
    ]
