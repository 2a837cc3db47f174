"""The reference grammars config is held to (infra/grammars.py), against their own sources: the
distribution reference grammar's productions and its test inputs (distribution/reference,
reference.go and reference_test.go), and for e-mail Python's own RFC 5322 address parser."""

from __future__ import annotations

import pytest

from infra import config, grammars, validation
from tests.conftest import patched_context

HEX64 = "f" * 64


@pytest.mark.parametrize(
    "reference, valid",
    [
        # Inputs of distribution/reference's reference_test.go, with its verdicts.
        ("test.com/repo:tag", True),
        ("test:5000/repo", True),
        (f"test:5000/repo:tag@sha256:{HEX64}", True),
        ("lowercase:Uppercase", True),  # a tag may have capitals
        ("sub-dom1.foo.com/bar/baz/quux:some-long-tag", True),
        ("b.gcr.io/test.example.com/my-app:test.example.com", True),
        ("xn--n3h.com/myimage:xn--n3h.com", True),
        ("192.168.1.1:5000/repo", True),
        ("foo/foo_bar.com:8080", True),
        ("a/" * 127 + "a:tag-puts-this-over-max", True),  # 255 characters of path exactly
        ("", False),
        (":justtag", False),
        (f"@sha256:{HEX64}", False),
        ("repo@sha256:" + "f" * 34, False),  # not a sha256's length
        (f"validname@invaliddigest:{HEX64}", False),
        ("Uppercase:tag", False),
        ("test:5000/Uppercase/lowercase:tag", False),
        ("domain/" + "a" * 256 + ":tag", False),  # a path over 255 characters
        ("aa/asdf$$^/aa", False),
        # The productions at their edges.
        ("reg.io/repo:-tag", False),  # a tag starts with a word character
        ("reg.io/repo:.tag", False),
        ("reg.io/repo:" + "t" * 128, True),
        ("reg.io/repo:" + "t" * 129, False),
        ("reg.io//repo:tag", False),  # an empty path component
        ("reg.io/repo/:tag", False),
        ("reg.io/a__b--c.d_e:tag", True),  # '__', any number of '-', '.', '_' between alphanumerics
        ("reg.io/a___b:tag", False),
        ("reg.io/-a:tag", False),
        ("[::1]:5000/repo:tag", True),
        (f"reg.io/repo@sha256:{'F' * 64}", False),  # go-digest's encoding is lowercase
    ],
)
def test_image_references_follow_the_distribution_grammar(reference, valid):
    assert (grammars.image_reference_problem(reference) is None) is valid, grammars.image_reference_problem(reference)


@pytest.mark.parametrize(
    "reference, says",
    [
        ("llama-train:v1", "names no registry"),  # Docker Hub's library/, anonymously and rate-limited
        ("reg.io/repo", "neither a tag nor a digest"),
        (f"reg.io/repo:1.0@sha256:{HEX64}", None),
        ("localhost/repo:1", None),
        ("111111111111.dkr.ecr.us-east-1.amazonaws.com/train:1", None),
    ],
)
def test_an_image_without_its_registry_or_a_tag_is_legal_and_warned(reference, says):
    # The grammar makes both optional (Docker Hub and :latest are what the kubelet then pulls),
    # so each is a warning with its consequence, never a refusal.
    assert grammars.image_reference_problem(reference) is None
    caution = grammars.image_reference_caution(reference)
    assert caution is None if says is None else says in caution
    if says:
        _, warnings = validation.load_settings(patched_context("dev", {"sample_job": {"image_uri": reference}}), "dev")
        assert any(w.startswith(f"dev: sample_job.image_uri: {reference!r} ") and says in w for w in warnings), warnings


@pytest.mark.parametrize("field", ["sample_job.image_uri", "acceptance.nccl_image", "acceptance.dcgm_image"])
def test_every_field_that_takes_an_image_is_held_to_the_grammar(field):
    section, name = field.split(".")
    with pytest.raises(config.ConfigError) as err:
        validation.load_settings(patched_context("dev", {section: {name: "reg.io/Repo:1"}}), "dev")
    assert any(p.startswith(f"dev: {field}: 'reg.io/Repo:1' breaks the grammar") for p in err.value.problems)
    defaults = config.AcceptanceSettings()
    assert grammars.image_reference_problem(defaults.nccl_image) is None and grammars.image_reference_problem(defaults.dcgm_image) is None


ADDRESSES = [
    "ops@example.com", "first.last+alerts@ml.example.co.uk", '"on call"@example.com', "o'brien@example.com",
    "mailto:ops@example.com", "ops@example.com;", "ops@@example.com", "a b@example.com", ".ops@example.com",
    "ops.@example.com", "ops@example", "ops@-example.com", "ops@example..com", "ops@exa_mple.com", "ops,ml@example.com",
]


@pytest.mark.parametrize("address", ADDRESSES)
def test_an_address_python_refuses_is_refused(address):
    # Python's RFC 5322 addr-spec parser (email.headerregistry): SMTP's mailbox is narrower (no
    # comments, no obsolete forms, a domain of labels), so nothing it refuses may pass here.
    from email.headerregistry import Address

    try:
        Address(addr_spec=address)
    except Exception:  # noqa: BLE001 - any refusal of the parser
        assert grammars.email_problem(address) is not None


@pytest.mark.parametrize(
    "address, valid",
    [("ops@example.com", True), ("first.last+alerts@ml.example.co.uk", True), ('"on call"@example.com', True),
     ("o'brien@example.com", True), ("mailto:ops@example.com", False), ("ops@example.com;", False),
     ("ops@example", False), ("ops@-example.com", False), ("x" * 64 + "@example.com", True), ("x" * 65 + "@example.com", False)],
)
def test_an_address_is_an_smtp_mailbox(address, valid):
    assert (grammars.email_problem(address) is None) is valid
