"""Where a request goes: the request's URL with the picked endpoint's scheme, host and port."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import httpx  # type: ignore[import-not-found, unused-ignore]  # optional: mypy without httpx too


@dataclass(frozen=True)
class Target:
    """An endpoint's origin: ``url`` as normalised (``http://10.0.0.1:8080``), the parts of a
    request's URL it replaces, and the ``Host`` header a request sent straight to it carries."""

    url: str
    scheme: str
    host: str
    port: Optional[int]
    authority: str
    #: httpx's own parsed form of the URL, when this httpx has the one routed_url reads.
    parsed: Any


def target_of(url: str) -> Target:
    if not isinstance(url, str):
        raise TypeError(f"an endpoint's url must be a str, not {type(url).__name__}")
    parsed = httpx.URL(url)
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise ValueError(f"endpoint {url!r} is not an absolute http or https URL")
    if parsed.path not in ("", "/") or parsed.query or parsed.fragment or parsed.userinfo:
        # The request keeps its own path and query; a prefix here would be silently dropped.
        raise ValueError(
            f"endpoint {url!r} must be an origin (scheme://host[:port]) with no path, query or credentials"
        )
    authority = parsed.netloc.decode("ascii")
    reference = getattr(parsed, "_uri_reference", None)
    return Target(f"{parsed.scheme}://{authority}", parsed.scheme, parsed.host, parsed.port, authority, reference)


def _slow_url(url: httpx.URL, target: Target) -> httpx.URL:
    return url.copy_with(scheme=target.scheme, host=target.host, port=target.port)


def _fast_url(url: httpx.URL, target: Target) -> httpx.URL:
    """``url.copy_with(scheme=, host=, port=)`` without its cost: copy_with parses the whole URL
    again (about 15 µs, more than the rest of the transport's work together), while the parts
    it replaces come already parsed from the endpoint. httpx keeps a URL as a named tuple of
    parsed parts (``_uri_reference``, httpx 0.28 and 0.29); the three are swapped in it."""
    endpoint = target.parsed
    routed = httpx.URL.__new__(httpx.URL)
    routed._uri_reference = url._uri_reference._replace(
        scheme=endpoint.scheme, host=endpoint.host, port=endpoint.port
    )
    return routed


def _fast_path_agrees() -> bool:
    """Whether _fast_url gives what copy_with gives, on this httpx: private parts may change
    in any release, and then every request takes copy_with."""
    try:
        for endpoint in ("http://10.0.0.1:8080", "https://Bücher.example", "http://[::1]:81"):
            target = target_of(endpoint)
            for request in ("http://svc/a%20b/c?x=1&y=%C3%A9", "https://user:pw@svc:8443/", "http://svc"):
                url = httpx.URL(request)
                fast, slow = _fast_url(url, target), _slow_url(url, target)
                if fast != slow or str(fast) != str(slow) or fast.raw_path != slow.raw_path or fast.port != slow.port:
                    return False
        return True
    except Exception:
        return False


#: The request URL routed to ``target``.
routed_url = _fast_url if _fast_path_agrees() else _slow_url


def route(request: httpx.Request, target: Target) -> httpx.Request:
    """The request as sent to ``target``: its scheme, host and port, and a Host header that
    names it (a virtual host or TLS server expects its own name) when the request's names its
    URL's host (what httpx sets); a Host the caller set to something else is theirs to keep (a
    virtual host behind the endpoint), as polylbhttp keeps it. Path, query, headers and body
    the caller's. A new request: the caller's stays as it was, for httpx's redirects and the
    response's ``request``."""
    headers = request.headers.copy()
    host = headers.get("Host")
    if host is None or host.encode("ascii", "replace").lower() == request.url.netloc.lower():
        headers["Host"] = target.authority
    return httpx.Request(
        request.method, routed_url(request.url, target), headers=headers, stream=request.stream, extensions=request.extensions
    )


def unroute_location(request: httpx.Request, response: httpx.Response, target: Target) -> None:
    """A redirect to the endpoint itself made a redirect to the request's own origin. The
    provider saw the endpoint's name in ``Host`` (route's), and frameworks build an absolute
    redirect from it (a trailing-slash one of Starlette's or Werkzeug's): left as it is, httpx
    would take it for another origin, drop the ``Authorization`` header and send the next
    request to an endpoint the balancer did not pick (it is routed again, anywhere). As a
    reverse proxy renames its upstream's redirects, the caller sees only its own origin."""
    if not 300 <= response.status_code < 400 or not request.url.host:
        return
    location = response.headers.get("location")
    if location is None:
        return
    try:
        url = httpx.URL(location)
    except httpx.InvalidURL:
        return  # httpx's redirect handling says what is wrong with it
    if url.scheme == target.scheme and url.netloc.decode("ascii") == target.authority:
        origin = request.url
        response.headers["Location"] = str(url.copy_with(scheme=origin.scheme, host=origin.host, port=origin.port))
