"""The page's Content-Security-Policy, in process: scripts, styles and calls from its own
origin only, and nothing inline that such a policy would block (the browser tests show the
page working under it, and fail on any violation or request to another origin)."""

from html.parser import HTMLParser

from django.test import Client

POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self' data: blob:; frame-ancestors 'none'"
)


class InlineCode(HTMLParser):
    """What the policy would refuse to run: inline scripts (a JSON data block is not one),
    style elements and attributes, event handler attributes and javascript: URLs."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        named = dict(attrs)
        if tag == "script" and not named.get("src") and named.get("type") != "application/json":
            self.found.append(self.get_starttag_text() or tag)
        if tag == "style":
            self.found.append("<style>")
        for name, value in attrs:
            if name == "style" or name.startswith("on"):
                self.found.append(f"{tag} {name}={value!r}")
            if (value or "").strip().lower().startswith("javascript:"):
                self.found.append(f"{tag} {name}={value!r}")


def test_the_page_keeps_scripts_styles_and_calls_to_its_own_origin():
    response = Client().get("/ui/")
    assert response.status_code == 200
    assert response["Content-Security-Policy"] == POLICY


def test_the_page_has_nothing_inline_that_its_policy_would_block():
    html = Client().get("/ui/").content.decode()
    parser = InlineCode()
    parser.feed(html)
    assert parser.found == []
    assert '<script id="ui-config" type="application/json">' in html  # data, not code
