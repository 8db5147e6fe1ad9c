"""Redaction against corpora: every planted secret gone in every shape, benign texts untouched.

tests/data/secret_corpus.txt holds 108 secret formats (fake values of the right shape, among
them Authorization headers, dates of birth, and tau-bench user ids after a cue and
payment-method ids as the recorded runs word them) and tests/data/benign_corpus.txt 85 benign
texts (among them snake_case names with digits such as ``max_tokens_2048`` and
``skill_loop_2024``, user-id and Authorization prose without a credential, tool names,
payment words without an id). The corpora are redacted with the tau-bench formats of the
trajectories importer (:data:`dyna.loops.trajectories.TAU_BENCH_FORMATS`: the general
formats and the tau-bench ids). Each secret is planted in 8
shapes a stored field can carry it (bare string, dict value under a harmless key, dict key,
value of JSON embedded in a string, key of JSON embedded in a string, list item,
``NOTE=<secret>`` line of a log, and the text with ``\\n`` escapes turned into real
newlines): 864 plantings, 0 persisted in clear, every format caught by a named detector (or
the assignment rule). Every benign text is returned unchanged in 6 shapes (510 checks, 0
altered) and fires no detector. Three tau-bench runs (tests/data/tau_bench_sample)
redacted whole keep none of their user's id, e-mail, dates of birth, address or
payment-method ids. Leaks are
searched for as the planted secret value itself, in every string and key of the output and of
any JSON inside it, never with the redactor's own detectors. ``pytest -s`` prints the counts.
"""

import collections
import json
import re
from pathlib import Path

import pytest

from dyna.redact import REDACTED, detect, is_sensitive_key, keyed_hash, redact, scan

DATA = Path(__file__).parent / "data"

pytestmark = pytest.mark.usefixtures("tau_bench_formats")


def _lines(name):
    return [line.rstrip("\n") for line in (DATA / name).read_text(encoding="utf-8").splitlines()
            if line.strip() and not line.startswith("#")]


def _secrets():
    out = []
    for line in _lines("secret_corpus.txt"):
        parts = line.split("\t")
        assert len(parts) in (2, 3), line
        name, text = parts[0], parts[1]
        out.append((name, text, parts[2] if len(parts) == 3 else text))
    return out


SECRETS = _secrets()
BENIGN = _lines("benign_corpus.txt")

SHAPES = {
    "bare": lambda t: t,
    "dict_value": lambda t: {"note": t},
    "dict_key": lambda t: {t: "kept"},
    "json_value": lambda t: json.dumps({"tool_output": t, "step": 3}),
    "json_key": lambda t: json.dumps({t: {"ok": True}}),
    "list": lambda t: ["first", t, 3],
    "key_value_line": lambda t: f"step 3 started\nNOTE={t}\ndone in 2.1 s",
    "real_newlines": lambda t: t.replace("\\n", "\n"),
}


def _strings(obj):
    """Every string of ``obj`` (keys included), and of JSON embedded in its strings."""
    if isinstance(obj, str):
        yield obj
        s = obj.strip()
        if s[:1] in "{[":
            try:
                yield from _strings(json.loads(s))
            except ValueError:
                pass
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from _strings(k)
            yield from _strings(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _strings(v)


def _leaks(out, secret) -> bool:
    variants = {secret, secret.replace("\\n", "\n")}
    return any(v in s for s in _strings(out) for v in variants)


def test_corpus_sizes():
    assert len(SECRETS) == 108 and len(BENIGN) == 85  # the counts of the module docstring
    names = [n for n, _, _ in SECRETS]
    for must in ("aws_secret_key (bare)", "aws_secret_key (env)", "gitlab_token", "slack_webhook",
                 "stripe_key (secret)", "stripe_key (restricted)", "google_oauth_secret",
                 "pgp_private_key", "url_credentials (postgres, brief example)",
                 "basic_auth (no digit)", "DB_PASSWORD line", "DJANGO_SECRET_KEY line",
                 "SLACK_TOKEN line", "azure_connection_string (storage)", "azure_sas_token",
                 "npm_token", "pypi_token", "twilio_key (account sid)", "sendgrid_key",
                 "mailgun_key", "discord_bot_token", "telegram_bot_token",
                 "http_cookie (Cookie)", "credit_card (visa)", "email_address",
                 "phone_number (US)", "us_ssn", "authorization_header (Token hex)",
                 "authorization_header (Bearer, no digit)", "user_id (my user ID is)",
                 "user_id (with ID)", "user_id (You are)", "user_id (tool arguments)",
                 "date_of_birth (DOB:)", "payment_method_id (payment_id:)",
                 "payment_method_id (in a lesson)", "user_id (The user, x,)"):
        assert must in names
    for must in ("skill_loop_2024", "no_outcome_gate", "agent_tasks_v2",
                 "update_reservation_flights", "book_reservation"):
        assert must in BENIGN
    # a payment-method id is no benign text
    assert not any("credit_card_4421486" in t for t in BENIGN)


@pytest.mark.parametrize("name, text, secret", SECRETS, ids=[s[0] for s in SECRETS])
def test_every_secret_redacted_in_every_shape(name, text, secret):
    assert detect(text), f"{name}: no detector fires"
    for shape, build in SHAPES.items():
        given = build(text)
        out = redact(given)
        assert not _leaks(out, secret), f"{name} persisted in clear as {shape}: {out!r}"
    out = redact({text: "kept"})  # a secret key is replaced, its value kept (unless the
    ((key, value),) = out.items()  # key also names a secret: "-----BEGIN ... PRIVATE KEY")
    assert key.startswith("[REDACTED:")
    assert value == (REDACTED if is_sensitive_key(text) else "kept")


@pytest.mark.parametrize("text", BENIGN)
def test_every_benign_text_unchanged(text):
    assert detect(text) == [], text
    assert redact(text) == text
    assert redact({"note": text}) == {"note": text}
    assert list(redact({text: 1})) == [text]  # the key itself is never altered
    assert redact(["a", text]) == ["a", text]
    embedded = json.dumps({"tool_output": text})
    assert redact(embedded) == embedded
    line = f"step 3\nNOTE={text}\ndone"
    assert redact(line) == line


def test_counts_printed():
    """Counts: formats, shapes, plantings, catches per detector, benign checks."""
    caught = collections.Counter()
    leaks = 0
    for _, text, secret in SECRETS:
        caught.update(detect(text))
        for build in SHAPES.values():
            leaks += _leaks(redact(build(text)), secret)
    altered = sum(redact(b(t)) != b(t) for t in BENIGN
                  for b in (lambda t: t, lambda t: {"note": t}, lambda t: [t],
                            lambda t: json.dumps({"o": t}), lambda t: f"NOTE={t}"))
    altered += sum(list(redact({t: 1})) != [t] for t in BENIGN)
    print(f"\nsecret formats {len(SECRETS)}, shapes {len(SHAPES)}, plantings "
          f"{len(SECRETS) * len(SHAPES)}, persisted in clear {leaks}")
    print(f"benign texts {len(BENIGN)}, checks {len(BENIGN) * 6}, altered {altered}")
    print("catches per detector:", dict(sorted(caught.items())))
    assert leaks == 0 and altered == 0
    assert sum(caught.values()) >= len(SECRETS)


# A tau-bench airline tool output (get_user_details), copied from the public MIT-licensed
# runs in sierra-research/tau-bench historical_trajectories/gpt-4o-airline.json (synthetic
# personas): personal data as JSON inside a tool-output string, payment methods keyed by id.
TAU_USER = ('{"name": {"first_name": "Mia", "last_name": "Li"}, "address": {"address1": '
            '"975 Sunset Drive", "address2": "Suite 217", "city": "Austin", "country": "USA", '
            '"province": "TX", "zip": "78750"}, "email": "mia.li3818@example.com", "dob": '
            '"1990-04-05", "payment_methods": {"credit_card_4421486": {"source": "credit_card", '
            '"brand": "visa", "last_four": "7447", "id": "credit_card_4421486"}, '
            '"certificate_4856383": {"source": "certificate", "amount": 100, "id": '
            '"certificate_4856383"}}, "saved_passengers": [{"first_name": "Amelia", '
            '"last_name": "Ahmed", "dob": "1957-03-21"}], "membership": "gold", '
            '"reservations": ["NO6JO3", "AIXC49", "HKEG34"]}')
TAU_RESERVATION = ('{"reservation_id": "HATHAT", "user_id": "mia_li_3668", "origin": "JFK", '
                   '"passengers": [{"first_name": "Mia", "last_name": "Li", "dob": '
                   '"1990-04-05"}], "payment_history": [{"payment_id": "credit_card_4421486", '
                   '"amount": 55}], "created_at": "2024-05-15T15:00:00"}')


def test_taubench_personal_data_shapes():
    msg = {"role": "tool", "name": "get_user_details", "content": TAU_USER}
    out = redact(msg)
    assert out["role"] == "tool"
    user = json.loads(out["content"])
    assert user["name"] == REDACTED and user["address"] == REDACTED
    assert user["email"] == REDACTED and user["dob"] == REDACTED
    assert user["saved_passengers"] == [{"first_name": REDACTED, "last_name": REDACTED,
                                         "dob": REDACTED}]
    # payment-method ids are personal data: each key becomes a keyed hash, the card entry's
    # value is redacted, the certificate's amount kept
    methods = user["payment_methods"]
    assert sorted(methods) == sorted(f"[REDACTED:{keyed_hash(k)}]" for k in
                                     ("credit_card_4421486", "certificate_4856383"))
    assert methods[f"[REDACTED:{keyed_hash('credit_card_4421486')}]"] == REDACTED
    assert methods[f"[REDACTED:{keyed_hash('certificate_4856383')}]"] == {
        "source": "certificate", "amount": 100, "id": REDACTED}
    assert user["membership"] == "gold" and user["reservations"] == ["NO6JO3", "AIXC49", "HKEG34"]
    for planted in ("1990-04-05", "1957-03-21", "975 Sunset Drive", "mia.li3818@example.com",
                    "Amelia", "Austin", "credit_card_4421486", "certificate_4856383"):
        assert not _leaks(out, planted), planted

    res = json.loads(redact(TAU_RESERVATION))
    assert res["user_id"] == REDACTED  # a user id is personal data (USER_ID_KEY_NAMES)
    assert res["passengers"] == [{"first_name": REDACTED, "last_name": REDACTED, "dob": REDACTED}]
    assert res["payment_history"] == [{"payment_id": REDACTED, "amount": 55}]  # an id: redacted
    assert res["created_at"] == "2024-05-15T15:00:00" and res["origin"] == "JFK"

    # e-mail in free text; a dict keyed by an e-mail address
    said = redact({"role": "user", "content": "Sure, my email is mia.li3818@example.com."})
    assert said["content"] == f"Sure, my email is {REDACTED}."
    by_mail = redact({"mia.li3818@example.com": {"tier": "gold"}})
    ((key, value),) = by_mail.items()
    assert key.startswith("[REDACTED:") and value == {"tier": "gold"}
    assert scan(msg)["email_address"] == 1  # the e-mail value inside the embedded JSON
    assert scan(said) == {} and scan({"c": "a mia.li3818@example.com"}) == {"email_address": 1}


# 3 of the 200 runs, copied with their MIT licence and provenance (tests/data/tau_bench_sample)
TRAJECTORIES = Path(__file__).resolve().parent / "data" / "tau_bench_sample" / "runs.json"
# Three runs chosen for the shapes they carry: (task 3, trial 0) the user answers "Sure, it's
# <user id>." with no cue in that message; (37, 0) "(with ID: <id>)" in the instruction and
# "added to user <id>" in a tool output; (32, 2) dates of birth in the agent's prose
# ("DOB: 1967-12-12") and the e-mail address in the user's.
TRAJECTORY_RUNS = ((3, 0), (37, 0), (32, 2))


def _objects(obj):
    """Every dict of ``obj``, JSON embedded in strings included (plain parsing, no detector)."""
    if isinstance(obj, str):
        s = obj.strip()
        if s[:1] in "{[" and s[-1:] in "}]":
            try:
                yield from _objects(json.loads(s))
            except ValueError:
                pass
    elif isinstance(obj, dict):
        yield obj
        for v in obj.values():
            yield from _objects(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _objects(v)


def _personal_values(run) -> dict[str, set[str]]:
    """The run's own personal data, read from its structure: the task's user id, and every
    ``user_id``, ``email``, ``dob`` and ``address`` line, every ``payment_id`` and the keys
    and ``id`` of every ``payment_methods`` found in any object of the run."""
    found = collections.defaultdict(set)
    found["user_id"].add(run["info"]["task"]["user_id"])
    for d in _objects(run):
        for k, v in d.items():
            if k in ("user_id", "email", "dob") and isinstance(v, str):
                found[k].add(v)
            elif k == "address" and isinstance(v, dict):
                found["address"].update(v[p] for p in ("address1", "address2") if v.get(p))
            elif k == "payment_id" and isinstance(v, str):
                found["payment_id"].add(v)
            elif k == "payment_methods" and isinstance(v, dict):
                found["payment_id"].update(v)
                found["payment_id"].update(m["id"] for m in v.values() if "id" in m)
    return found


@pytest.mark.parametrize("task_id, trial", TRAJECTORY_RUNS)
def test_taubench_runs_keep_no_personal_data_in_clear(task_id, trial):
    runs = json.loads(TRAJECTORIES.read_text(encoding="utf-8"))
    (run,) = [r for r in runs if (r["task_id"], r["trial"]) == (task_id, trial)]
    values = _personal_values(run)
    assert {"user_id", "email", "dob", "address", "payment_id"} <= set(values)
    before = {kind: sum(v in t for t in _strings(run) for v in vs) for kind, vs in values.items()}
    assert min(before.values()) >= 1
    out = redact(run)
    left = {kind: sorted(v for v in vs if _leaks(out, v)) for kind, vs in values.items()}
    assert left == {kind: [] for kind in values}, left
    # what is not personal data stays: roles, tool-call argument keys, flight numbers,
    # reservation ids; payment-method ids do not. (A tool's "name" is redacted like any
    # free-form "name" key.)
    assert [m["role"] for m in out["traj"]] == [m["role"] for m in run["traj"]]
    args = [sorted(json.loads(c["function"]["arguments"])) for m in run["traj"]
            for c in m.get("tool_calls") or []]
    assert [sorted(json.loads(c["function"]["arguments"])) for m in out["traj"]
            for c in m.get("tool_calls") or []] == args and args
    assert sum("HAT" in t for t in _strings(out)) >= 1
    assert sum("credit_card_" in t for t in _strings(run)) >= 1
    assert not any(re.search(r"(?:credit|gift)_card_\d|certificate_\d", t)
                   for t in _strings(out))


def test_keyed_hash_is_the_same_in_every_process_and_follows_the_env_key():
    import os
    import subprocess
    import sys

    from dyna.redact import keyed_hash

    code = "from dyna.redact import keyed_hash; print(keyed_hash('AKIAIOSFODNN7EXAMPLE'))"
    env = {k: v for k, v in os.environ.items() if k != "DYNA_REDACT_KEY"}
    outs = {subprocess.run([sys.executable, "-c", code], env=env, check=True,
                           capture_output=True, text=True).stdout.strip() for _ in range(2)}
    assert outs == {keyed_hash("AKIAIOSFODNN7EXAMPLE", b"dyna-redact-v1")}
    other = subprocess.run([sys.executable, "-c", code], env={**env, "DYNA_REDACT_KEY": "k2"},
                           check=True, capture_output=True, text=True).stdout.strip()
    assert other == keyed_hash("AKIAIOSFODNN7EXAMPLE", b"k2") != outs.pop()


@pytest.mark.parametrize("text, secret", [
    ("Password: Tr0ub4dor&3", "Tr0ub4dor&3"),
    ("client_secret=abc;def123", "abc;def123"),
    ("GET /cb?a=1&token=s3cr3tvalue99&b=2", "s3cr3tvalue99"),
    ("password=hunter2hunter2, then retry", "hunter2hunter2"),
])
def test_unquoted_values_with_punctuation_are_redacted_whole(text, secret):
    """A value used to stop at ',', ';' or '&': 'Tr0ub4dor&3' kept '&3' in clear."""
    from dyna.redact import redact_text

    out = redact_text(text)
    assert secret not in out and not any(part in out for part in secret.split("&")[1:]
                                         if len(part) > 1)
    assert out.count("[REDACTED]") == 1
