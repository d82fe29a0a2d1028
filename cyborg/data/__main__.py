# SPDX-License-Identifier: Apache-2.0
"""The shipped data of an installed package, for use outside Python.

    python -m cyborg.data                           # every kind and name
    python -m cyborg.data device-profiles           # the names of a kind
    python -m cyborg.data device-profiles h200-whole  # one file's content
    python -m cyborg.data --path fake-hosts gpu-host  # one file's path

A profile's content is a ready-to-POST body:
curl -d "$(python -m cyborg.data device-profiles h200-whole)" ...
"""

import argparse
import sys

from cyborg import data

KINDS = (data.FAKE_HOSTS, data.DEVICE_PROFILES)


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog='python -m cyborg.data',
        description='List or print the fake host specs and device profiles '
                    'shipped inside the package.')
    parser.add_argument('--path', action='store_true',
                        help='print the file\'s path, not its content')
    parser.add_argument('kind', nargs='?', choices=KINDS)
    parser.add_argument('name', nargs='?')
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.kind is None:
        for kind in KINDS:
            print('%s: %s' % (kind, ' '.join(data.names(kind))))
        return 0
    if args.name is None:
        print('\n'.join(data.names(args.kind)))
        return 0
    try:
        path = data.path(args.kind, args.name)
    except data.NotFound as e:
        print('python -m cyborg.data: %s' % e, file=sys.stderr)
        return 1
    if args.path:
        print(path)
    else:
        with open(path) as f:
            sys.stdout.write(f.read())
    return 0


if __name__ == '__main__':
    sys.exit(main())
