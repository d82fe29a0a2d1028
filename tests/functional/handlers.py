# SPDX-License-Identifier: Apache-2.0
"""`response_fault`: assertions on Cyborg's error body.

Every error answer is `{"error_message": "<JSON string>"}` whose string
holds `{"faultcode": "Client"|"Server", "faultstring": ..., "debuginfo":
null}`. This handler checks that shape on every 4xx/5xx answer in the suite,
and, where a test names one, the faultstring:

    response_fault: Device Profile not found with name=foo
    response_fault: /requires a service token/          # a regex
"""

import json

from gabbi.handlers import base


class FaultHandler(base.ResponseHandler):

    test_key_suffix = 'fault'
    test_key_value = ''

    def __call__(self, test):
        status = int(test.response['status'])
        expected = test.test_data[self._key]
        if status < 400:
            test.assertFalse(expected, 'response_fault set on a %d answer'
                             % status)
            return
        body = json.loads(test.output)
        test.assertEqual(['error_message'], list(body),
                         'not a Cyborg error body: %s' % test.output)
        fault = json.loads(body['error_message'])
        test.assertEqual({'faultcode', 'faultstring', 'debuginfo'},
                         set(fault))
        test.assertEqual('Client' if status < 500 else 'Server',
                         fault['faultcode'])
        test.assertIsNone(fault['debuginfo'])
        if not expected:
            return
        if self.is_regex(expected):
            pattern = test.replace_template(expected, escape_regex=True)
            test.assertRegex(fault['faultstring'], pattern[1:-1])
        else:
            test.assertEqual(test.replace_template(expected),
                             fault['faultstring'])
