"""An independent OpenID Connect client (authlib) driving anteroom's OIDC adapter (SPEC §11).

Run by crates/anteroom/tests/oidc.rs against the real `anteroom` binary:

    python oidc_client.py single <public url> <service key>
    python oidc_client.py multinode <node 1 url> <node 2 url>

Every check is an assertion; the script exits non-zero at the first failure and prints one
JSON line of measurements at the end.
"""

import base64
import json
import sys
import time
from urllib.parse import parse_qs, urljoin, urlparse

import requests
from authlib.common.security import generate_token
from authlib.integrations.base_client.errors import OAuthError
from authlib.integrations.requests_client import OAuth2Session
from authlib.jose import JsonWebKey, jwt
from authlib.jose.errors import BadSignatureError
from authlib.oidc.core import CodeIDToken

CALLBACK = "https://app.example/oauth2/callback"
SECRETS = {"portal": "portal-secret", "brief": "brief-secret"}


def check(condition, message):
    if not condition:
        raise AssertionError(message)


class Provider:
    """What the client learns from discovery."""

    def __init__(self, base):
        answer = requests.get(base + "/.well-known/openid-configuration", timeout=10)
        check(answer.status_code == 200, f"discovery answered {answer.status_code}")
        self.meta = answer.json()
        self.keys = JsonWebKey.import_key_set(
            requests.get(self.meta["jwks_uri"], timeout=10).json()
        )

    def client(self, client_id, auth_method, base=None):
        """An authlib client; `base` sends its token and userinfo calls to another node."""
        client = OAuth2Session(
            client_id,
            SECRETS.get(client_id),
            token_endpoint_auth_method=auth_method,
            scope="openid",
            redirect_uri=CALLBACK,
            code_challenge_method="S256",
        )
        client.token_url = self.endpoint("token_endpoint", base)
        client.userinfo_url = self.endpoint("userinfo_endpoint", base)
        return client

    def endpoint(self, name, base):
        url = self.meta[name]
        if base is None:
            return url
        return base + urlparse(url).path

    def verify_id_token(self, id_token, client_id, nonce):
        claims = jwt.decode(
            id_token,
            self.keys,
            claims_cls=CodeIDToken,
            claims_options={"iss": {"essential": True, "value": self.meta["issuer"]}},
            claims_params={"nonce": nonce, "client_id": client_id},
        )
        claims.validate()
        return claims


class Visitor:
    """A browser: a cookie jar following anteroom's redirects, without JavaScript."""

    def __init__(self):
        self.browser = requests.Session()

    def navigate(self, url):
        """Follows redirects until the client's callback (returned) or a page (200)."""
        for _ in range(10):
            answer = self.browser.get(url, allow_redirects=False, timeout=10)
            if answer.status_code in (302, 303):
                url = urljoin(url, answer.headers["Location"])
                if url.startswith(CALLBACK):
                    return ("callback", url)
                continue
            return ("page", url, answer)
        raise AssertionError("too many redirects")


class Flow:
    """One authorization request of one client for one visitor."""

    def __init__(self, provider, visitor, client_id, auth_method, token_base=None):
        self.provider = provider
        self.visitor = visitor
        self.client_id = client_id
        self.client = provider.client(client_id, auth_method, token_base)
        self.verifier = generate_token(48)
        self.nonce = generate_token(20)
        self.url, self.state = self.client.create_authorization_url(
            provider.meta["authorization_endpoint"],
            code_verifier=self.verifier,
            nonce=self.nonce,
        )

    def start(self):
        return self.visitor.navigate(self.url)

    def exchange(self, callback, **extra):
        extra.setdefault("code_verifier", self.verifier)
        token = self.client.fetch_token(
            self.client.token_url,
            authorization_response=callback,
            state=self.state,
            **extra,
        )
        claims = self.provider.verify_id_token(token["id_token"], self.client_id, self.nonce)
        check(token["token_type"].lower() == "bearer", f"token_type {token['token_type']}")
        check(0 < token["expires_in"] <= 300, f"expires_in {token['expires_in']}")
        return token, claims

    def userinfo(self, token):
        return requests.get(
            self.client.userinfo_url,
            headers={"Authorization": "Bearer " + token["access_token"]},
            timeout=10,
        )


def callback_params(callback):
    return {key: values[0] for key, values in parse_qs(urlparse(callback).query).items()}


def expect_oauth_error(error, action):
    try:
        action()
    except OAuthError as raised:
        check(raised.error == error, f"expected {error}, got {raised.error}: {raised.description}")
        return raised
    raise AssertionError(f"expected the error {error}, but the call succeeded")


def raw_token_call(provider, data, auth=None):
    return requests.post(provider.meta["token_endpoint"], data=data, auth=auth, timeout=10)


def complete_session(base, room, session, service_key):
    answer = requests.post(
        f"{base}/_anteroom/v1/rooms/{room}/sessions/{session}/complete",
        headers={"Authorization": "Bearer " + service_key},
        timeout=10,
    )
    check(answer.status_code == 200, f"complete answered {answer.status_code}: {answer.text}")


def check_revoked(flow, token, why):
    answer = flow.userinfo(token)
    check(answer.status_code == 401, f"{why}: userinfo answered {answer.status_code}")
    challenge = answer.headers.get("WWW-Authenticate", "")
    check('error="invalid_token"' in challenge, f"{why}: challenge {challenge!r}")


def single(base, service_key):
    provider = Provider(base)
    meta = provider.meta
    check(meta["issuer"] == base, f"issuer {meta['issuer']}")
    check(meta["code_challenge_methods_supported"] == ["S256"], "only S256 is offered")
    check(meta["response_types_supported"] == ["code"], "only the code flow is offered")
    results = {}

    # The first visitor finds the room empty: let in at once, code, tokens, userinfo.
    first = Flow(provider, Visitor(), "portal", "client_secret_basic")
    outcome = first.start()
    check(outcome[0] == "callback", f"first visitor should be let in at once: {outcome}")
    params = callback_params(outcome[1])
    check(params["state"] == first.state, "state comes back")
    token_a, claims_a = first.exchange(outcome[1])
    check(claims_a["aud"] == "portal", f"aud {claims_a['aud']}")
    check(claims_a["auth_time"] <= claims_a["iat"], "auth_time is not after iat")
    info = first.userinfo(token_a)
    check(info.status_code == 200, f"userinfo answered {info.status_code}: {info.text}")
    check(info.json() == {"sub": claims_a["sub"], "room": "portal"}, f"userinfo {info.text}")

    # The second visitor must wait: max_active = 1 and the first is inside.
    second = Flow(provider, Visitor(), "portal", "client_secret_post")
    outcome = second.start()
    check(outcome[0] == "page", f"second visitor should wait: {outcome}")
    waiting_page = outcome[1]
    check("/_anteroom/wait/portal" in waiting_page, f"waiting page {waiting_page}")
    check(outcome[2].status_code == 200, f"waiting page answered {outcome[2].status_code}")
    for _ in range(3):
        time.sleep(0.3)
        outcome = second.visitor.navigate(waiting_page)
        check(outcome[0] == "page", "still waiting while the first visitor is inside")

    # The first visitor leaves; the second is let in and sent back with a code.
    left_at = time.monotonic()
    complete_session(base, "portal", claims_a["sub"], service_key)
    while True:
        outcome = second.visitor.navigate(waiting_page)
        if outcome[0] == "callback":
            break
        check(time.monotonic() - left_at < 10, "second visitor not let in within 10 s")
        time.sleep(0.2)
    results["wait_after_leave_ms"] = round((time.monotonic() - left_at) * 1000)
    callback_b = outcome[1]
    check(callback_params(callback_b)["state"] == second.state, "state survives the wait")
    token_b, claims_b = second.exchange(callback_b)
    check(claims_b["sub"] != claims_a["sub"], "the second visitor has a session of their own")
    check(second.userinfo(token_b).status_code == 200, "second visitor's token works")
    check_revoked(first, token_a, "first visitor's session completed")

    # A reused code fails and revokes what the first use got.
    expect_oauth_error("invalid_grant", lambda: second.exchange(callback_b))
    check_revoked(second, token_b, "code reused")

    # A tampered ID token does not verify.
    header, payload, signature = token_b["id_token"].split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    claims["sub"] = claims_a["sub"]
    forged = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    try:
        provider.verify_id_token(f"{header}.{forged}.{signature}", "portal", second.nonce)
        raise AssertionError("a tampered ID token verified")
    except BadSignatureError:
        pass

    # Unregistered redirect URI and unknown client: an error page, never a redirect.
    for query in (
        {"client_id": "portal", "redirect_uri": "https://evil.example/cb"},
        {"client_id": "nobody", "redirect_uri": CALLBACK},
    ):
        query.update(response_type="code", scope="openid", state="s", nonce="n")
        answer = requests.get(
            meta["authorization_endpoint"], params=query, allow_redirects=False, timeout=10
        )
        check(answer.status_code == 400, f"{query}: answered {answer.status_code}")
        check("Location" not in answer.headers, f"{query}: redirected")
        check("text/html" in answer.headers["Content-Type"], f"{query}: not a page")

    # Mistakes the client can hear about go back to it with error and state.
    challenge = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
    for client_id, change, error in (
        ("spa", {}, "invalid_request"),  # a public client without PKCE
        ("spa", {"code_challenge": challenge, "code_challenge_method": "plain"}, "invalid_request"),
        ("spa", {"code_challenge": challenge}, "invalid_request"),  # plain by default
        ("portal", {"response_type": "token"}, "unsupported_response_type"),
        ("portal", {"scope": "profile"}, "invalid_scope"),
    ):
        query = {
            "client_id": client_id,
            "redirect_uri": CALLBACK,
            "response_type": "code",
            "scope": "openid",
            "state": "st-" + error,
            "nonce": "n",
        }
        query.update(change)
        answer = requests.get(
            meta["authorization_endpoint"], params=query, allow_redirects=False, timeout=10
        )
        check(answer.status_code == 302, f"{change}: answered {answer.status_code}")
        location = answer.headers["Location"]
        check(location.startswith(CALLBACK), f"{change}: sent to {location}")
        params = callback_params(location)
        check(params.get("error") == error, f"{change}: {params}")
        check(params.get("state") == query["state"], f"{change}: state {params}")
        check("code" not in params, f"{change}: a code came with an error")

    # PKCE: a missing or wrong verifier fails and does not spend the code; the right one works.
    public = Flow(provider, Visitor(), "spa", "none")
    outcome = public.start()
    check(outcome[0] == "callback", f"spa visitor should be let in at once: {outcome}")
    code = callback_params(outcome[1])["code"]
    base_request = {
        "grant_type": "authorization_code",
        "code": code,
        "redirect_uri": CALLBACK,
        "client_id": "spa",
    }
    for verifier, why in ((None, "missing"), (generate_token(48), "incorrect")):
        data = dict(base_request)
        if verifier is not None:
            data["code_verifier"] = verifier
        answer = raw_token_call(provider, data)
        check(answer.status_code == 400, f"{why} verifier: answered {answer.status_code}")
        check(answer.json()["error"] == "invalid_grant", f"{why} verifier: {answer.text}")
        check(answer.headers.get("Cache-Control") == "no-store", f"{why}: cacheable error")
    data = dict(base_request, redirect_uri="https://app.example/other")
    data["code_verifier"] = public.verifier
    answer = raw_token_call(provider, data)
    check(answer.json().get("error") == "invalid_grant", f"other redirect_uri: {answer.text}")
    token_p, _ = public.exchange(outcome[1])
    check(public.userinfo(token_p).status_code == 200, "public client's token works")

    # A wrong client secret (Basic or in the body) is refused; a code outlives its TTL never.
    brief = Flow(provider, Visitor(), "brief", "client_secret_basic")
    outcome = brief.start()
    check(outcome[0] == "callback", f"brief visitor should be let in at once: {outcome}")
    code = callback_params(outcome[1])["code"]
    data = {
        "grant_type": "authorization_code",
        "code": code,
        "redirect_uri": CALLBACK,
        "code_verifier": brief.verifier,
    }
    answer = raw_token_call(provider, data, auth=("brief", "wrong-secret"))
    check(answer.status_code == 401, f"wrong Basic secret: answered {answer.status_code}")
    check(answer.json()["error"] == "invalid_client", f"wrong Basic secret: {answer.text}")
    check(answer.headers.get("WWW-Authenticate", "").startswith("Basic"), "Basic challenge")
    answer = raw_token_call(
        provider, dict(data, client_id="brief", client_secret="wrong-secret")
    )
    check(answer.status_code == 401, f"wrong posted secret: answered {answer.status_code}")
    check(answer.json()["error"] == "invalid_client", f"wrong posted secret: {answer.text}")
    time.sleep(1.2)
    expired = expect_oauth_error("invalid_grant", lambda: brief.exchange(outcome[1]))
    check("expired" in expired.description, f"expired code: {expired.description}")

    print(json.dumps(results))


def multinode(node_1, node_2):
    provider = Provider(node_1)
    flow = Flow(provider, Visitor(), "spa", "none", token_base=node_2)
    outcome = flow.start()
    check(outcome[0] == "callback", f"visitor should be let in at once: {outcome}")
    token, claims = flow.exchange(outcome[1])
    check(flow.userinfo(token).status_code == 200, "token from node 2 works on node 2")
    again = Flow(provider, flow.visitor, "spa", "none", token_base=node_1)
    again.verifier, again.state, again.nonce = flow.verifier, flow.state, flow.nonce
    expect_oauth_error("invalid_grant", lambda: again.exchange(outcome[1]))
    check_revoked(flow, token, "code reused on another node")
    print(json.dumps({"sub": claims["sub"]}))


if __name__ == "__main__":
    if sys.argv[1] == "single":
        single(sys.argv[2], sys.argv[3])
    else:
        multinode(sys.argv[2], sys.argv[3])
