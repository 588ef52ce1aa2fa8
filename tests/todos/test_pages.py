"""`GET /todos?limit=N`: pages in list order, each todo once, the next page in `Link`."""

import base64
import re
import uuid

import pytest

LINK = re.compile(r'</todos\?limit=(\d+)&after=([A-Za-z0-9_-]+)>; rel="next"')
# Well-formed, but its createdAt (2**62 ms after 1970) is no date.
BEYOND_TIME = base64.urlsafe_b64encode((2**62).to_bytes(8) + bytes(12)).decode().rstrip("=")


def insert(app, http, titles: list[str]) -> None:
    response = http.patch(app.url("/todos"), json={"todos": [{"title": t} for t in titles]})
    assert response.status_code == 201, response.text


def next_page(response) -> str | None:
    """The path the Link header points to, checked against its exact form."""
    link = response.headers.get("Link")
    if link is None:
        return None
    match = LINK.fullmatch(link)
    assert match, link
    return link[1 : link.index(">")]


def walk(app, http, limit: int, between=None) -> list[list[dict]]:
    """Every page from the first, calling between(page_number) after each."""
    pages = []
    path: str | None = f"/todos?limit={limit}"
    while path is not None:
        response = http.get(app.url(path))
        assert response.status_code == 200, response.text
        assert set(response.json()) == {"data", "error"} and response.json()["error"] is None
        pages.append(response.json()["data"])
        path = next_page(response)
        if between is not None:
            between(len(pages))
    return pages


def test_without_limit_the_list_is_whole_and_has_no_link(app, http):
    insert(app, http, [f"t{i}" for i in range(5)])
    response = http.get(app.url("/todos"))
    assert [t["title"] for t in response.json()["data"]] == [f"t{i}" for i in range(5)]
    assert "Link" not in response.headers


def test_without_limit_a_large_collection_is_answered_a_page_at_a_time(app, http):
    """Past 1,000 todos (TODO_LIST_MAX) the plain list is the first 1,000, still a bare array,
    with a Link to the rest: never the whole collection in one answer."""
    titles = [f"t{i}" for i in range(1001)]
    insert(app, http, titles[:1000])
    whole = http.get(app.url("/todos"))
    assert len(whole.json()["data"]) == 1000 and "Link" not in whole.headers
    insert(app, http, titles[1000:])
    first = http.get(app.url("/todos"))
    assert first.status_code == 200 and isinstance(first.json()["data"], list)
    assert [t["title"] for t in first.json()["data"]] == titles[:1000]
    rest = next_page(first)
    assert rest is not None and rest.startswith("/todos?limit=1000&after=")
    following = http.get(app.url(rest))
    assert [t["title"] for t in following.json()["data"]] == ["t1000"]
    assert next_page(following) is None


@pytest.mark.parametrize("limit", [1, 3, 4, 7, 12, 1000])
def test_pages_cover_every_todo_once_in_list_order(app, http, create, limit):
    create("single 0")
    insert(app, http, [f"batch {i}" for i in range(9)])  # one createdAt: ordered by id
    create("single 1")
    whole = http.get(app.url("/todos")).json()["data"]

    pages = walk(app, http, limit)

    assert [todo for page in pages for todo in page] == whole
    assert all(len(page) == limit for page in pages[:-1])
    assert 1 <= len(pages[-1]) <= limit
    assert len(pages) == -(-len(whole) // limit)  # exactly full: no empty page with a Link


def test_an_empty_list_is_one_page_without_link(app, http):
    response = http.get(app.url("/todos?limit=5"))
    assert response.json() == {"data": [], "error": None}
    assert "Link" not in response.headers


def test_pages_are_stable_under_concurrent_inserts_and_deletes(app, http):
    """Todos written between two pages neither repeat nor hide a todo of the pages to come:
    the cursor names the last todo seen, not a position in the list."""
    insert(app, http, [f"old {i}" for i in range(10)])
    before = http.get(app.url("/todos")).json()["data"]
    late: list[str] = []

    def write_meanwhile(page_number: int) -> None:
        title = f"late {page_number}"
        late.append(title)
        assert http.post(app.url("/todo"), json={"todo": {"title": title}}).status_code == 201
        if page_number == 1:  # a todo already shown goes away: nothing after it shifts
            assert http.delete(app.url(f"/todo/{before[0]['id']}")).status_code == 202

    seen = [todo for page in walk(app, http, 3, between=write_meanwhile) for todo in page]

    ids = [todo["id"] for todo in seen]
    assert len(ids) == len(set(ids))
    assert seen[: len(before)] == before
    # Inserted after the walk began, each late todo sorts after every old one and is seen
    # unless it came after the last page.
    assert [t["title"] for t in seen[len(before) :]] == late[: len(seen) - len(before)]


@pytest.mark.parametrize(
    ("query", "field", "rule"),
    [
        ("limit=0", "limit", "greater than or equal to 1"),
        ("limit=-1", "limit", "greater than or equal to 1"),
        ("limit=1001", "limit", "less than or equal to 1000"),
        ("limit=ten", "limit", "valid integer"),
        ("limit=2.5", "limit", "valid integer"),
        ("limit=", "limit", "valid integer"),
        ("limit=2&after=nonsense", "after", "not a cursor"),
        ("limit=2&after=" + "A" * 26 + "B", "after", "not a cursor"),  # another spelling
        ("limit=2&after=" + BEYOND_TIME, "after", "not a cursor"),
        ("after=" + "A" * 27, "limit", "required with after"),
    ],
)
def test_a_bad_limit_or_cursor_is_400_naming_the_field_and_rule(app, http, query, field, rule):
    response = http.get(app.url(f"/todos?{query}"))
    assert response.status_code == 400, response.text
    body = response.json()
    assert body["data"] is None
    assert body["error"]["message"].startswith(f"Invalid request: {field}: ")
    (detail,) = body["error"]["details"]
    assert detail["field"] == field and rule in detail["message"]


def test_a_batch_added_after_the_count_still_gives_at_most_a_page(mongo, connect_here, monkeypatch):
    """The count (server metadata) and the read are two calls: a batch added between them must
    not make the plain list longer than its bound. The count is read before the batch here."""
    from todos import selectors, services
    from todos.documents import todos_collection

    connect_here(mongo.uri(f"first_page_{uuid.uuid4().hex[:8]}"))
    services.todo_create(title="before", description=None)
    counted = todos_collection().estimated_document_count()  # 1: within a page of 2
    services.todo_create(title="after one", description=None)
    services.todo_create(title="after two", description=None)

    class CountedBefore:
        """The collection as it was counted, then read as it is now."""

        def __getattr__(self, name):
            return getattr(todos_collection(), name)

        def estimated_document_count(self) -> int:
            return counted

    monkeypatch.setattr(selectors, "todos_collection", CountedBefore)
    documents, following = selectors.todo_first_page(limit=2)
    assert [d["title"] for d in documents] == ["before", "after one"]
    assert following is not None
