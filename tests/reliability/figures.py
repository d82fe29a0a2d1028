# SPDX-License-Identifier: Apache-2.0
"""The figures a reliability or fault check reports: one line on stdout
(`pytest -s` shows it) and, when CYBORG_RELIABILITY_FIGURES names a file,
one JSON line appended to it, which docs/reliability.md is written from.
"""

import json
import os
import time


def record(check, **counts):
    line = '%s: %s' % (check, ', '.join('%s=%s' % kv
                                        for kv in counts.items()))
    print(line, flush=True)
    path = os.environ.get('CYBORG_RELIABILITY_FIGURES')
    if path:
        with open(path, 'a') as f:
            f.write(json.dumps(dict(counts, check=check,
                                    at=time.strftime('%Y-%m-%dT%H:%M:%SZ',
                                                     time.gmtime())))
                    + '\n')
    return line
