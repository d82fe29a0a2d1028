# SPDX-License-Identifier: Apache-2.0
"""A quick first check of request bodies against our JSON schemas.

compile(schema) gives a function that answers True only for a value the
schema accepts (as jsonschema, Draft 2020-12 with format checks, would);
False means "not shown valid here", and jsonschema then decides, and
words the error (controllers.base.validate). So a body is never accepted
that jsonschema would refuse, and every refusal keeps jsonschema's
message; a valid body costs a few function calls instead of jsonschema's
walk (a tenth of a device profile's creation).

Only what our schemas use is understood; any other keyword, or a value
it would take care to judge exactly (a float for an integer, an enum of
non-strings), answers False.
"""

import re


def _never(value):
    return False


def _always(value):
    return True


_TYPES = {
    'object': lambda v: type(v) is dict,
    'array': lambda v: type(v) is list,
    'string': lambda v: type(v) is str,
    'integer': lambda v: type(v) is int,
    'number': lambda v: type(v) in (int, float),
    'boolean': lambda v: type(v) is bool,
    'null': lambda v: v is None,
}

# Every string this matches, Python's uuid.UUID reads and has its dashes
# where jsonschema's "uuid" format wants them; other forms go to
# jsonschema.
UUID = re.compile('[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-'
                  '[0-9a-fA-F]{4}-[0-9a-fA-F]{12}')

_KNOWN = frozenset((
    'type', 'properties', 'additionalProperties', 'required', 'items',
    'minItems', 'maxItems', 'minProperties', 'minLength', 'maxLength',
    'pattern', 'format', 'enum', 'const', 'anyOf', 'minimum', 'maximum'))


def compile(schema):
    """A function value -> True when `schema` surely accepts `value`."""
    if schema is True or schema == {}:
        return _always
    if not isinstance(schema, dict) or set(schema) - _KNOWN:
        return _never
    checks = []
    kind = schema.get('type')
    if kind is not None:
        kinds = [kind] if isinstance(kind, str) else list(kind)
        if not kinds or any(k not in _TYPES for k in kinds):
            return _never
        tests = [_TYPES[k] for k in kinds]
        checks.append(tests[0] if len(tests) == 1 else
                      (lambda v: any(t(v) for t in tests)))
    string = _string(schema)
    if string is None:
        return _never
    checks.extend(string)
    for make in (_number, _object, _array, _choice):
        more = make(schema)
        if more is None:
            return _never
        checks.extend(more)
    if not checks:
        return _always
    if len(checks) == 1:
        return checks[0]
    return lambda v: all(check(v) for check in checks)


def _string(schema):
    """Length, pattern and format checks, which apply to strings only."""
    checks = []
    length = _length(schema, 'minLength', 'maxLength', str)
    if length is False:
        return None
    if length is not None:
        checks.append(length)
    if 'pattern' in schema:
        pattern = re.compile(schema['pattern'])
        checks.append(lambda v: type(v) is not str or
                      pattern.search(v) is not None)
    if 'format' in schema:
        if schema['format'] != 'uuid':
            return None
        checks.append(lambda v: type(v) is not str or
                      UUID.fullmatch(v) is not None)
    return checks


def _number(schema):
    """minimum and maximum: an integer within them passes."""
    low, high = schema.get('minimum'), schema.get('maximum')
    if low is None and high is None:
        return []
    if any(b is not None and type(b) is not int for b in (low, high)):
        return None
    low = float('-inf') if low is None else low
    high = float('inf') if high is None else high
    return [lambda v: type(v) in (str, list, dict, bool) or v is None or (
        type(v) is int and low <= v <= high)]


def _object(schema):
    checks = []
    properties = schema.get('properties', {})
    extra = schema.get('additionalProperties', True)
    required = schema.get('required', [])
    least = schema.get('minProperties')
    if not isinstance(properties, dict) or not isinstance(required, list):
        return None
    if least is not None and type(least) is not int:
        return None
    named = {k: compile(s) for k, s in properties.items()}
    if extra is False:
        others = _never
    else:
        others = compile(extra)
    if named or extra is not True:
        def members(v):
            if type(v) is not dict:
                return True
            for key, value in v.items():
                check = named.get(key, others)
                if not check(value):
                    return False
            return True
        checks.append(members)
    if required:
        needed = tuple(required)
        checks.append(lambda v: type(v) is not dict or
                      all(k in v for k in needed))
    if least is not None:
        checks.append(lambda v: type(v) is not dict or len(v) >= least)
    return checks


def _array(schema):
    checks = []
    if 'items' in schema:
        item = compile(schema['items'])
        checks.append(lambda v: type(v) is not list or
                      all(item(i) for i in v))
    length = _length(schema, 'minItems', 'maxItems', list)
    if length is False:
        return None
    if length is not None:
        checks.append(length)
    return checks


def _length(schema, low_key, high_key, kind):
    """The check of a value's length bounds (which apply to values of
    `kind` only); None without bounds, False for bounds it does not judge.
    """
    low, high = schema.get(low_key), schema.get(high_key)
    if low is None and high is None:
        return None
    low = 0 if low is None else low
    high = float('inf') if high is None else high
    if type(low) is not int or not isinstance(high, (int, float)):
        return False
    return lambda v: type(v) is not kind or low <= len(v) <= high


def _choice(schema):
    """enum and const of strings, and anyOf."""
    checks = []
    for key in ('enum', 'const'):
        if key in schema:
            allowed = schema[key] if key == 'enum' else [schema[key]]
            if not isinstance(allowed, list) or any(
                    type(a) is not str for a in allowed):
                return None
            allowed = frozenset(allowed)
            checks.append(lambda v: type(v) is str and v in allowed)
    if 'anyOf' in schema:
        branches = [compile(s) for s in schema['anyOf']]
        checks.append(lambda v: any(b(v) for b in branches))
    return checks
