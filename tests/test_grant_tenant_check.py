"""`dyna.store.postgres.grant_tenant` applies the one tenant rule
(:func:`dyna.experience.episodes.check_tenant`) before it connects, so no cluster is needed."""

import pytest

from dyna.errors import ConfigError
from dyna.store.postgres import grant_tenant


@pytest.mark.parametrize("tenant, message", [
    ("t" * 4097, "tenant='4097 characters': a label has at most MAX_LABEL_CHARS=4096 "
                 "characters"),
    ("a\x00b", "tenant='NUL at position 1': a label must not contain a NUL character"),
    ("", "tenant='': a non-empty tenant id is required"),
])
def test_grant_tenant_refuses_a_bad_tenant_before_connecting(tenant, message):
    with pytest.raises(ConfigError) as err:
        grant_tenant(None, "role1", tenant)     # no store: the check runs first
    assert str(err.value) == message


def test_grant_tenant_refuses_a_bad_role_and_a_second_spelling():
    with pytest.raises(ConfigError) as err:
        grant_tenant(None, "", "t1")
    assert str(err.value) == "role=\"''\": must be a non-empty string without NUL"
    with pytest.raises(ConfigError, match="its NFKC form is 't1'"):
        grant_tenant(None, "role1", "\uff541")
