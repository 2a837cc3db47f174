"""Grammars of the references config names, written from their documented productions (no code
carried over), each returning why a value breaks it, in words, or None.

- Image references: the distribution reference grammar (github.com/distribution/reference,
  reference.go's header, v0.5.0):
      reference        := name [ ":" tag ] [ "@" digest ]
      name             := [domain '/'] remote-name
      domain           := host [':' port-number]
      host             := domain-name | IPv4address | \\[ IPv6address \\]
      domain-name      := domain-component ['.' domain-component]*
      domain-component := /([a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])/
      port-number      := /[0-9]+/
      remote-name      := path-component ['/' path-component]*
      path-component   := alpha-numeric [separator alpha-numeric]*
      alpha-numeric    := /[a-z0-9]+/
      separator        := /[_.]|__|[-]+/
      tag              := /[\\w][\\w.-]{0,127}/
      digest           := digest-algorithm ":" digest-hex
      digest-algorithm := component [ /[+.-_]/ component ]*, component := /[A-Za-z][A-Za-z0-9]*/
      digest-hex       := /[0-9a-fA-F]{32,}/
  and its limit on a repository path, 255 characters (RepositoryNameTotalLengthMax). A digest
  is one of the algorithms opencontainers/go-digest registers, in lowercase hex of its length
  (sha256 64, sha384 96, sha512 128 characters).
- E-mail addresses: SNS's email protocol takes "an email address" (the SNS API reference,
  Subscribe's Endpoint) and delivers it by SMTP, so the address is an SMTP mailbox (RFC 5321
  section 4.1.2): Local-part "@" Domain, the local part a Dot-string of atoms or a
  Quoted-string, the domain dot-separated labels of letters, digits and inner hyphens; at most
  64 characters before the "@" and 255 after it (section 4.5.3.1).
"""

from __future__ import annotations

import re

_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_HOST = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[a-fA-F0-9:]+\])"
_DOMAIN = rf"{_HOST}(?::[0-9]+)?"
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[_.]|__|-+)[a-z0-9]+)*"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
_REFERENCE = re.compile(
    rf"(?P<name>(?:(?P<domain>{_DOMAIN})/)?(?P<path>{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*))"
    rf"(?::(?P<tag>{_TAG}))?(?:@(?P<digest>{_DIGEST}))?",
    re.ASCII,
)
PATH_MAX = 255
DIGEST_HEX = {"sha256": 64, "sha384": 96, "sha512": 128}
IMAGE_WORDS = (
    "an image reference is [registry/]repository[:tag][@digest]: lowercase path components of letters and digits "
    "joined by '.', '_', '__' or '-' and separated by single '/', a tag of at most 128 letters, digits, '_', '.' and "
    "'-' not starting with '.' or '-', a digest like sha256:<64 hex>"
)


def image_reference_problem(value: str) -> str | None:
    """Why `value` is not an image reference a registry and the kubelet take, or None: the
    grammar alone (a reference without a registry or a tag is legal and pulls;
    image_reference_caution says what it leaves to chance)."""
    found = _REFERENCE.fullmatch(value)
    if found is None:
        return f"breaks the grammar; {IMAGE_WORDS}"
    if len(found["path"]) > PATH_MAX:
        return f"has a repository path of {len(found['path'])} characters; the grammar allows {PATH_MAX}"
    if found["digest"]:
        algorithm, _, hex_ = found["digest"].partition(":")
        if algorithm not in DIGEST_HEX:
            return f"has a {algorithm} digest; the algorithms are {', '.join(DIGEST_HEX)}"
        if not re.fullmatch(rf"[a-f0-9]{{{DIGEST_HEX[algorithm]}}}", hex_):
            return f"has a {algorithm} digest that is not {DIGEST_HEX[algorithm]} lowercase hex characters"
    return None


def image_reference_caution(value: str) -> str | None:
    """What a legal reference leaves to chance, or None: without a registry host the kubelet
    pulls from Docker Hub (anonymous pulls are rate-limited); without a tag or digest it
    pulls whatever :latest is that day."""
    found = _REFERENCE.fullmatch(value)
    if found is None:
        return None
    domain = found["domain"]
    # Without a '.' or ':' (or localhost) the first component is a path, as Docker reads it.
    if domain is None or not ("." in domain or ":" in domain or domain == "localhost"):
        return "names no registry, so it is pulled from Docker Hub (rate-limited when anonymous); give the registry's host"
    if found["tag"] is None and found["digest"] is None:
        return "has neither a tag nor a digest, so it is whatever :latest is at each pull; pin one (:tag or @sha256:<digest>)"
    return None


_ATOM = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+"
_QUOTED = r'"(?:[\x20\x21\x23-\x5b\x5d-\x7e]|\\[\x20-\x7e])*"'
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
_MAILBOX = re.compile(rf"(?P<local>{_ATOM}(?:\.{_ATOM})*|{_QUOTED})@(?P<domain>{_LABEL}(?:\.{_LABEL})+)", re.ASCII)
EMAIL_WORDS = (
    "an e-mail address is local-part@domain (an SMTP mailbox, RFC 5321): no scheme like mailto:, no spaces, commas or "
    "semicolons outside quotes, a domain of dot-separated labels of letters, digits and inner hyphens"
)


def email_problem(value: str) -> str | None:
    """Why `value` is not an e-mail address SNS can deliver to, or None."""
    found = _MAILBOX.fullmatch(value)
    if found is None:
        return f"is not an e-mail address; {EMAIL_WORDS}"
    if len(found["local"]) > 64 or len(found["domain"]) > 255:
        return "is longer than SMTP allows (64 characters before the @, 255 after it; RFC 5321 4.5.3.1)"
    return None
