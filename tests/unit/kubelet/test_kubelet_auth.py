"""Authentication and authorization: the path → subresource table, client-cert users, token
and SAR caches on a fake clock, and what 401/403 say."""

from __future__ import annotations

import pytest
from kubelet_helpers import FakeReviews

from gateway.kubelet.auth.access import (
    ANONYMOUS,
    Authenticator,
    AuthError,
    Authorizer,
    TTLCache,
    UserInfo,
    bearer_token,
    subresources_for,
    user_from_cert,
    verb_for,
)
from vkgate_core.clock import FakeClock


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/stats/summary", ("stats",)),
        ("/stats/", ("stats",)),
        ("/metrics/resource", ("metrics",)),
        ("/metrics", ("metrics",)),
        ("/metrics/cadvisor", ("metrics",)),
        ("/logs/syslog", ("log",)),
        ("/spec/", ("spec",)),
        ("/checkpoint/ns/p/c", ("checkpoint",)),
        ("/pods", ("pods", "proxy")),
        ("/pods/", ("pods", "proxy")),
        ("/runningpods/", ("pods", "proxy")),
        ("/healthz", ("healthz", "proxy")),
        ("/healthz/ping", ("healthz", "proxy")),
        ("/configz", ("configz", "proxy")),
        ("/containerLogs/ns/p/c", ("proxy",)),
        ("/exec/ns/p/c", ("proxy",)),
        ("/attach/ns/p/c", ("proxy",)),
        ("/portForward/ns/p", ("proxy",)),
        ("/run/ns/p/c", ("proxy",)),
        ("/", ("proxy",)),
        ("/statsx", ("proxy",)),
    ],
)
def test_path_to_subresource_table(path: str, expected: tuple[str, ...]) -> None:
    assert subresources_for(path) == expected


@pytest.mark.parametrize(
    ("method", "verb"),
    [
        ("GET", "get"),
        ("HEAD", "get"),
        ("POST", "create"),
        ("PUT", "update"),
        ("PATCH", "patch"),
        ("DELETE", "delete"),
    ],
)
def test_method_to_verb(method: str, verb: str) -> None:
    assert verb_for(method) == verb


def test_user_from_verified_certificate() -> None:
    cert = {
        "subject": (
            (("organizationName", "system:masters"),),
            (("organizationName", "team-a"),),
            (("commonName", "kube-apiserver-kubelet-client"),),
        )
    }
    user = user_from_cert(cert)
    assert user == UserInfo(
        "kube-apiserver-kubelet-client", groups=("system:masters", "team-a"), method="x509"
    )
    assert user_from_cert({}) is None
    assert user_from_cert(None) is None
    assert user_from_cert({"subject": ((("organizationName", "x"),),)}) is None


@pytest.mark.parametrize(
    ("header", "token"),
    [
        ("Bearer abc", "abc"),
        ("bearer  abc ", "abc"),
        ("Basic abc", None),
        ("Bearer", None),
        (None, None),
    ],
)
def test_bearer_token_parsing(header: str | None, token: str | None) -> None:
    assert bearer_token(header) == token


def _reviews() -> FakeReviews:
    return FakeReviews(
        tokens={
            "good": {
                "username": "alice",
                "uid": "u1",
                "groups": ["devs"],
                "extra": {"scopes": ["a"]},
            }
        },
        allow=lambda spec: (
            spec["user"] == "alice" and spec["resourceAttributes"]["subresource"] != "stats"
        ),
    )


async def test_token_cache_ttl_two_minutes_and_hashed_keys() -> None:
    clock = FakeClock()
    reviews = _reviews()
    authn = Authenticator(client=reviews, clock=clock)
    u = await authn.authenticate(peer_cert=None, authorization="Bearer good")
    assert u == UserInfo(
        "alice", uid="u1", groups=("devs",), extra=(("scopes", ("a",)),), method="token"
    )
    await clock.advance(119)
    await authn.authenticate(peer_cert=None, authorization="Bearer good")
    assert reviews.count("tokenreviews") == 1
    assert "good" not in repr(authn.cache._data)  # cached under a hash, never in clear
    await clock.advance(2)
    await authn.authenticate(peer_cert=None, authorization="Bearer good")
    assert reviews.count("tokenreviews") == 2


async def test_bad_token_cached_30s_with_message() -> None:
    clock = FakeClock()
    reviews = _reviews()
    authn = Authenticator(client=reviews, clock=clock)
    for _ in range(2):
        with pytest.raises(AuthError) as e:
            await authn.authenticate(peer_cert=None, authorization="Bearer bad")
        assert e.value.status == 401 and "invalid bearer token" in e.value.message
    assert reviews.count("tokenreviews") == 1
    await clock.advance(31)
    with pytest.raises(AuthError):
        await authn.authenticate(peer_cert=None, authorization="Bearer bad")
    assert reviews.count("tokenreviews") == 2


async def test_token_review_errors_are_401_and_not_cached() -> None:
    reviews = FakeReviews(fail=True)
    authn = Authenticator(client=reviews, clock=FakeClock())
    for _ in range(2):
        with pytest.raises(AuthError) as e:
            await authn.authenticate(peer_cert=None, authorization="Bearer x")
        assert e.value.status == 401 and "TokenReview failed" in e.value.message
    assert reviews.count("tokenreviews") == 2


async def test_certificate_wins_over_token_and_anonymous_only_when_enabled() -> None:
    reviews = _reviews()
    cert = {"subject": ((("commonName", "apiserver"),),)}
    authn = Authenticator(client=reviews, clock=FakeClock())
    u = await authn.authenticate(peer_cert=cert, authorization="Bearer good")
    assert u.name == "apiserver" and reviews.count("tokenreviews") == 0
    with pytest.raises(AuthError) as e:
        await authn.authenticate(peer_cert=None, authorization=None)
    assert e.value.status == 401 and "anonymous access is disabled" in e.value.message
    anon = Authenticator(client=None, anonymous=True, clock=FakeClock())
    assert await anon.authenticate(peer_cert=None, authorization=None) == ANONYMOUS


async def test_sar_allow_cached_5min_deny_30s() -> None:
    clock = FakeClock()
    reviews = _reviews()
    authz = Authorizer(reviews, "vk-1", clock=clock)
    alice = UserInfo("alice", groups=("devs",))
    d = await authz.authorize(alice, method="GET", path="/containerLogs/a/b/c")
    assert d.allowed and d.subresource == "proxy"
    with pytest.raises(AuthError) as e:
        await authz.authorize(alice, method="GET", path="/stats/summary")
    assert e.value.status == 403
    assert e.value.message.startswith(
        "Forbidden (user=alice, verb=get, resource=nodes, subresource(s)=[stats])"
    )
    assert "no RBAC rule" in e.value.message
    assert reviews.count("subjectaccessreviews") == 2
    await clock.advance(29)
    await authz.authorize(alice, method="GET", path="/containerLogs/x/y/z")
    with pytest.raises(AuthError):
        await authz.authorize(alice, method="GET", path="/stats/summary")
    assert reviews.count("subjectaccessreviews") == 2  # both still cached
    await clock.advance(2)  # deny expired, allow not
    await authz.authorize(alice, method="GET", path="/exec/a/b/c")
    with pytest.raises(AuthError):
        await authz.authorize(alice, method="GET", path="/stats/summary")
    assert reviews.count("subjectaccessreviews") == 3
    await clock.advance(300)
    await authz.authorize(alice, method="GET", path="/exec/a/b/c")
    assert reviews.count("subjectaccessreviews") == 4


async def test_sar_verbs_differ_per_method_and_fallback_to_proxy() -> None:
    reviews = FakeReviews(allow=lambda spec: spec["resourceAttributes"]["subresource"] == "proxy")
    authz = Authorizer(reviews, "vk-1", clock=FakeClock())
    bob = UserInfo("bob")
    d = await authz.authorize(bob, method="GET", path="/pods")
    assert d.subresource == "proxy"
    await authz.authorize(bob, method="POST", path="/exec/a/b/c")
    attrs = [b["spec"]["resourceAttributes"] for _, b in reviews.calls]
    assert [(a["verb"], a["subresource"]) for a in attrs] == [
        ("get", "pods"),
        ("get", "proxy"),
        ("create", "proxy"),
    ]
    assert all(a["name"] == "vk-1" and a["resource"] == "nodes" for a in attrs)


async def test_sar_errors_are_500_not_cached_and_always_allow_skips_sar() -> None:
    reviews = FakeReviews(fail=True)
    authz = Authorizer(reviews, "vk-1", clock=FakeClock())
    for _ in range(2):
        with pytest.raises(AuthError) as e:
            await authz.authorize(UserInfo("x"), method="GET", path="/pods")
        assert e.value.status == 500 and "SubjectAccessReview failed" in e.value.message
    assert reviews.count("subjectaccessreviews") == 2
    allow_all = Authorizer(reviews, "vk-1", mode="always-allow", clock=FakeClock())
    assert (await allow_all.authorize(UserInfo("x"), method="GET", path="/pods")).allowed
    assert reviews.count("subjectaccessreviews") == 2


def test_ttl_cache_is_bounded_lru() -> None:
    clock = FakeClock()
    c: TTLCache[str, int] = TTLCache(clock, max_entries=2)
    c.put("a", 1, 10)
    c.put("b", 2, 10)
    assert c.get("a") == 1  # a is now most recent
    c.put("c", 3, 10)
    assert c.get("b") is None and c.get("a") == 1 and c.get("c") == 3
