# SPDX-License-Identifier: Apache-2.0
"""New uuids as text: what uuid.uuid4() makes of the same random bytes."""

import uuid

from hypothesis import given
from hypothesis import strategies as st

from cyborg.api import middleware
from cyborg.common import identifiers


@given(st.binary(min_size=16, max_size=16))
def test_the_text_of_uuid4_of_the_same_bytes(random):
    # uuid.uuid4() is UUID(bytes=os.urandom(16), version=4).
    original = identifiers.os.urandom
    identifiers.os.urandom = lambda n: random[:n]
    try:
        made = identifiers.new_uuid()
    finally:
        identifiers.os.urandom = original
    assert made == str(uuid.UUID(bytes=random, version=4))


def test_each_is_new_and_a_version_4_uuid():
    made = {identifiers.new_uuid() for _ in range(1000)}
    assert len(made) == 1000
    for text in made:
        parsed = uuid.UUID(text)
        assert parsed.version == 4 and parsed.variant == uuid.RFC_4122
        assert str(parsed) == text


def test_request_ids_are_req_and_a_new_uuid():
    req_id = middleware.generate_request_id()
    assert req_id.startswith('req-')
    assert uuid.UUID(req_id[4:]).version == 4
