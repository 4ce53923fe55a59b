"""API keys: where they come from, who a request's key names, and what a caller is told when it has
none, a wrong one, or one that may not use a model; the keys file's errors name their line; both key
files reload without a restart (the plain one as the kubelet updates a mounted Secret); a server
beyond loopback starts only with keys or anonymous: true."""

import hashlib
import os

import pytest

from serve_app.config import Security
from serve_app.edge.errors import RequestError
from serve_app.edge.keys import ANONYMOUS, RELOAD_EVERY_S, KeyRing, check_exposure, presented_key


def sha(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


KEYS_FILE = f"""keys:
  - name: team-a
    sha256: {sha("alpha")}
    requests_per_minute: 60
    tokens_per_minute: 10000
    models: [mai, mai-large]
    priority: 2
    weight: 3
  - name: ops
    sha256: {sha("omega")}
    admin: true
"""


def ring_of(tmp_path, text=KEYS_FILE, environ=None, clock=None):
    path = tmp_path / "keys.yaml"
    path.write_text(text)
    security = Security(keys_file=str(path))
    return (KeyRing(security, environ or {}, now=clock) if clock else KeyRing(security, environ or {})), path


def test_keys_come_from_the_env_var_the_plain_file_and_the_keys_file(tmp_path):
    plain = tmp_path / "plain"
    plain.write_text("# rotated monthly\nkey-from-file\n\n")
    ring = KeyRing(Security(api_keys_file=str(plain)), {"MAI_API_KEYS": "k1, k2,"})
    assert [key.name for key in ring.keys] == ["MAI_API_KEYS#1", "MAI_API_KEYS#2", "api_keys_file#2"]
    assert all(key.admin and key.requests_per_minute is None for key in ring.keys)
    assert KeyRing(Security(), {}).open  # nothing configured
    named, _ = ring_of(tmp_path)
    assert [key.name for key in named.keys] == ["team-a", "ops"]


def test_the_plain_keys_file_takes_keys_separated_by_commas_as_mai_api_keys_does(tmp_path):
    plain = tmp_path / "api-keys"
    plain.write_text("k1, k2,\n# the next one is ops'\nk3\n")
    ring = KeyRing(Security(api_keys_env=None, api_keys_file=str(plain)), {})
    assert [key.name for key in ring.keys] == ["api_keys_file#1.1", "api_keys_file#1.2", "api_keys_file#3"]
    for key in ("k1", "k2", "k3"):
        assert ring.identify({"authorization": f"Bearer {key}"}).key.admin
    with pytest.raises(RequestError, match="not valid"):
        ring.identify({"authorization": "Bearer k1, k2"})


@pytest.mark.parametrize(
    ("security", "environ", "refusal"),
    [
        (Security(), {"MAI_API_KEYS": ","}, "MAI_API_KEYS is set but holds no key"),
        (Security(), {"MAI_API_KEYS": ""}, "MAI_API_KEYS is set but holds no key"),
        (Security(api_keys_file="/nonexistent/keys"), {}, "api_keys_file /nonexistent/keys"),
        (Security(keys_file="/nonexistent/keys.yaml"), {}, "keys_file /nonexistent/keys.yaml"),
    ],
)
def test_a_key_source_that_yields_no_key_is_an_error_naming_it(security, environ, refusal):
    with pytest.raises(ValueError, match=refusal):
        KeyRing(security, environ)


@pytest.mark.parametrize(
    ("text", "refusal"),
    [
        (KEYS_FILE.replace("    weight: 3", "    wieght: 3"), "line 8: keys.0.wieght: Extra inputs"),
        (
            KEYS_FILE.replace("requests_per_minute: 60", "requests_per_minute: -1"),
            "line 4: keys.0.requests_per",
        ),
        (KEYS_FILE.replace(sha("omega"), "not-a-digest"), "line 10: keys.1.sha256"),
        (KEYS_FILE.replace("name: ops", "name: team-a"), "two keys share the name team-a"),
        ("keys:\n  - name: [unclosed\n", "line 3: not YAML or JSON"),
        ('{"keys": []}', "line 1: keys: Tuple should have at least 1 item"),
    ],
)
def test_a_malformed_keys_file_is_refused_naming_the_line(tmp_path, text, refusal):
    with pytest.raises(ValueError, match=refusal.replace("(", r"\(")):
        ring_of(tmp_path, text)


@pytest.mark.parametrize(
    ("headers", "name"),
    [
        ({"authorization": "Bearer alpha"}, "team-a"),
        ({"authorization": "bearer omega"}, "ops"),
        ({"x-api-key": "alpha"}, "team-a"),
        ({"authorization": "Bearer beta"}, None),
        ({"authorization": "Basic YWxwaGE="}, None),
        ({"authorization": "Bearer "}, None),
        ({}, None),
    ],
)
def test_a_request_is_named_by_its_key_and_a_wrong_key_learns_nothing(tmp_path, headers, name):
    ring, _ = ring_of(tmp_path)
    if name is not None:
        assert ring.identify(headers).name == name
        return
    with pytest.raises(RequestError) as caught:
        ring.identify(headers)
    error = caught.value
    assert error.status == 401 and error.headers == {"WWW-Authenticate": "Bearer"}
    assert not any(word in error.message for word in ("alpha", "omega", "team-a", "ops", "beta"))


def test_an_open_api_names_every_caller_anonymous():
    assert KeyRing(Security(), {}).identify({}).name == ANONYMOUS
    assert presented_key({"authorization": "Bearer abc"}) == "abc"


def test_a_key_may_use_only_its_models(tmp_path):
    ring, _ = ring_of(tmp_path)
    caller = ring.identify({"authorization": "Bearer alpha"})
    caller.check_model("mai")
    with pytest.raises(RequestError) as caught:
        caller.check_model("mai-small")
    assert caught.value.status == 403 and "mai-small" in caught.value.message
    ring.identify({"authorization": "Bearer omega"}).check_model("mai-small")  # no list: every model


def test_the_keys_file_reloads_without_a_restart_and_a_broken_one_keeps_the_keys(tmp_path):
    now = [0.0]
    ring, path = ring_of(tmp_path, clock=lambda: now[0])
    revoked = KEYS_FILE.split("  - name: ops")[0]  # ops removed
    path.write_text(revoked)
    os.utime(path, (1, 1))
    assert ring.identify({"authorization": "Bearer omega"}).name == "ops"  # not looked at yet
    now[0] = 10.0
    with pytest.raises(RequestError, match="not valid"):
        ring.identify({"authorization": "Bearer omega"})  # revoked
    path.write_text("keys: [")
    os.utime(path, (2, 2))
    now[0] = 20.0
    assert ring.identify({"authorization": "Bearer alpha"}).name == "team-a"  # the last good keys stay


def mounted_secret(folder, text: str, version: int):
    """``folder/api-keys`` as the kubelet lays out a Secret volume and updates it: a new timestamped
    folder with the file, then the ``..data`` symlink swapped to it in one rename; the file's path is a
    symlink through ``..data``. Every version's file has the same modification time here."""
    version_dir = folder / f"..2026_01_01_00_00_0{version}"
    version_dir.mkdir()
    (version_dir / "api-keys").write_text(text)
    os.utime(version_dir / "api-keys", (1, 1))
    (folder / "..data_tmp").symlink_to(version_dir.name)
    os.replace(folder / "..data_tmp", folder / "..data")
    if not (folder / "api-keys").is_symlink():
        (folder / "api-keys").symlink_to("..data/api-keys")
    return folder / "api-keys"


def test_the_plain_keys_file_reloads_when_the_kubelet_updates_the_secret_it_is_mounted_from(tmp_path):
    now = [0.0]
    path = mounted_secret(tmp_path, "old-key", 1)
    ring = KeyRing(Security(api_keys_env=None, api_keys_file=str(path)), {}, now=lambda: now[0])
    assert ring.identify({"authorization": "Bearer old-key"}).name == "api_keys_file#1"
    mounted_secret(tmp_path, "old-key,new-key", 2)  # rotate: the new key beside the old
    with pytest.raises(RequestError, match="not valid"):
        ring.identify({"authorization": "Bearer new-key"})  # not looked at yet
    now[0] = RELOAD_EVERY_S
    assert ring.identify({"authorization": "Bearer new-key"}).name == "api_keys_file#1.2"
    mounted_secret(tmp_path, "new-key", 3)  # once the clients have moved: the old key revoked
    now[0] = 2 * RELOAD_EVERY_S
    with pytest.raises(RequestError, match="not valid"):
        ring.identify({"authorization": "Bearer old-key"})
    assert ring.identify({"authorization": "Bearer new-key"}).name == "api_keys_file#1"
    mounted_secret(tmp_path, "# emptied by mistake\n", 4)
    now[0] = 3 * RELOAD_EVERY_S
    assert ring.identify({"authorization": "Bearer new-key"}).name == "api_keys_file#1"  # the last keys stay
    assert ring.keys == ring.listed and not ring.closed


@pytest.mark.parametrize(
    ("host", "keys", "anonymous", "access"),
    [
        ("127.0.0.1", False, False, "anonymous"),
        ("::1", False, False, "anonymous"),
        ("localhost", False, False, "anonymous"),
        ("0.0.0.0", True, False, "keys"),
        ("0.0.0.0", False, True, "anonymous"),
        ("0.0.0.0", False, False, None),
        ("10.0.0.5", False, False, None),
    ],
)
def test_beyond_loopback_the_server_starts_only_with_keys_or_said_anonymous(host, keys, anonymous, access):
    security = Security(anonymous=anonymous)
    ring = KeyRing(security, {"MAI_API_KEYS": "k1"} if keys else {})
    if access is None:
        with pytest.raises(ValueError, match=f"listens on {host} and no API key is configured"):
            check_exposure(host, ring, security)
    else:
        assert check_exposure(host, ring, security) == access
