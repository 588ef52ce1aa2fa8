"""An event stream's place is free once its last chunk is out, before the server writes the
stream's end: a client that opens its next stream on reading that end (one after another,
EVENT_STREAMS_MAX 2) found both places still held while the server had yet to close the
first response."""

from imagegen.generation.events import ClosingStream


def test_a_stream_read_to_its_end_gives_its_place_back_before_the_server_closes_it() -> None:
    given_back: list[str] = []

    def chunks():
        yield b"event: succeeded\n\n"

    stream = ClosingStream(chunks(), lambda: given_back.append("place"))
    assert list(stream) == [b"event: succeeded\n\n"]
    assert given_back == ["place"]  # before close(), which the server calls after the end


def test_a_stream_the_client_leaves_gives_its_place_back_at_close() -> None:
    given_back: list[str] = []

    def chunks():
        yield b"a"
        yield b"b"

    stream = ClosingStream(chunks(), lambda: given_back.append("place"))
    assert next(iter(stream)) == b"a"
    assert given_back == []
    stream.close()
    assert given_back == ["place"]
