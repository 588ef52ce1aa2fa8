"""The page and the API docs lead to each other, in process: the page links to /api/docs, and
the API's description, which the docs page (Ninja's Swagger UI) shows at its top as Markdown,
links back to /ui/. Each link reaches a page that answers."""

import re
from html.parser import HTMLParser

from django.test import Client


class Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        href = dict(attrs).get("href")
        if tag == "a" and href:
            self.hrefs.append(href)


def test_the_page_links_to_the_api_docs():
    client = Client()
    parser = Links()
    parser.feed(client.get("/ui/").content.decode())
    assert "/api/docs" in parser.hrefs
    docs = client.get("/api/docs")
    assert docs.status_code == 200 and b"swagger" in docs.content.lower()


def test_the_api_docs_description_links_back_to_the_page():
    client = Client()
    description = client.get("/api/openapi.json").json()["info"]["description"]
    assert re.search(r"\[[^\]]+\]\(/ui/\)", description), description  # a Markdown link
    assert client.get("/ui/").status_code == 200
    # The docs page renders the description from this very document.
    assert b"/api/openapi.json" in client.get("/api/docs").content


def test_the_page_names_its_icon_and_favicon_ico_leads_to_it():
    """No 404 for the icon on every load: the page names it, and a browser or tool that asks
    for /favicon.ico by that name is led to it."""
    client = Client()
    found = re.search(r'<link rel="icon" href="([^"]+)"', client.get("/ui/").content.decode())
    assert found, "the page names no icon"
    icon = client.get(found.group(1))
    assert icon.status_code == 200 and icon["Content-Type"].startswith("image/svg+xml")
    content = b"".join(icon.streaming_content)
    assert content.startswith(b"<svg")
    asked = client.get("/favicon.ico", follow=True)
    assert asked.status_code == 200, asked.redirect_chain
    assert b"".join(asked.streaming_content) == content
