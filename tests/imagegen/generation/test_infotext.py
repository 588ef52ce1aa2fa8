"""A1111's infotext parse (imagegen/generation/infotext.py) on texts A1111 writes and on odd
ones; how long a hostile text takes is timed through the API (tests/config/test_schema_fuzz.py)."""

from imagegen.generation.infotext import parse_infotext


def test_a1111_text_parses_as_a1111_parses_it():
    text = (
        "a cat\nin a hat\nNegative prompt: a dog\n"
        'Steps: 20,  Sampler: Euler a, CFG scale: 7, Size: 512x768, Hashes: "a: 1, \\"b\\": 2"'
    )
    assert parse_infotext(text) == {
        "Prompt": "a cat\nin a hat",
        "Negative prompt": "a dog",
        "Steps": "20",
        "Sampler": "Euler a",
        "CFG scale": "7",
        "Size-1": "512",
        "Size-2": "768",
        "Hashes": 'a: 1, "b": 2',
    }


def test_a_quoted_value_that_is_no_json_string_stays_as_written():
    parsed = parse_infotext('p\nSteps: 1, Seed: 2, Note: "\\"')
    assert parsed["Note"] == '"\\"'


def test_a_long_run_of_spaces_is_no_key():
    parsed = parse_infotext("p\n" + "a" + " " * 5000 + "b: 1, c: 2, d: 3")
    assert parsed["c"] == "2"
    assert len(parsed) == 5
