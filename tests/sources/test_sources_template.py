"""Templates: placeholders, escaping (table and property tests) and validation."""

from __future__ import annotations

from urllib.parse import unquote, urlsplit

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from torch_drt.sources import Template

VALUES = ["/", "\\", "?", "#", "&", "=", "%", "%2e", "%2F", "%00", "{", "}", " ", "é", "🙂", "a b/c?d#e", "x.y"]


@pytest.mark.parametrize("value", VALUES)
def test_url_values_stay_in_their_component(value):
    t = Template("https://h.example/images/{name}/tile?x={x}&k=1#frag", {"name": [value], "x": [3]}, "url")
    parts = urlsplit(t.location(0))
    assert parts.path.split("/") == ["", "images", parts.path.split("/")[2], "tile"]
    assert unquote(parts.path.split("/")[2]) == value
    assert parts.query == "x=3&k=1" and parts.fragment == "frag"


@pytest.mark.parametrize("value", [".", ".."])
@pytest.mark.parametrize("kind", ["url", "path", "key"])
def test_dot_segments_are_refused(value, kind):
    base = "https://h/{v}/x" if kind == "url" else "/data/{v}/x"
    t = Template(base, {"v": ["ok", value]}, kind)
    with pytest.raises(ValueError, match="cannot be used"):
        t.location(1)


@pytest.mark.parametrize("value", ["a/b", "a\\b", "a\x00b"])
@pytest.mark.parametrize("kind", ["path", "key"])
def test_separators_are_refused_in_paths_and_keys(value, kind):
    t = Template("root/{v}.png", {"v": ["fine", value]}, kind)
    with pytest.raises(ValueError, match="may not contain"):
        t.location(1)


@pytest.mark.parametrize("value", [v for v in VALUES if "/" not in v and "\\" not in v])
def test_paths_keep_other_values_as_they_are(value):
    assert Template("/data/{v}.png", {"v": [value]}, "path").location(0) == f"/data/{value}.png"


def test_empty_key_part_is_refused_but_empty_path_part_is_not():
    with pytest.raises(ValueError, match="key part may not be empty"):
        Template("{a}/{b}", {"a": ["x", "y"], "b": ["1", ""]}, "key").location(1)
    assert Template("/d/{a}x", {"a": [""]}, "path").location(0) == "/d/x"


def test_index_braces_ints_and_numpy():
    t = Template("https://h/{{literal}}/{index}/{n}", {"n": np.array([7, -2], dtype=np.int16)}, "url")
    assert t.location(1) == "https://h/{literal}/1/-2"
    assert Template("/f/{index}.bin", {}, "path", length=3).location(2) == "/f/2.bin"


@pytest.mark.parametrize(("template", "columns", "kwargs", "error", "message"), [
    ("https://h/{a}/{b}", {"a": [1]}, {}, ValueError, r"placeholder\(s\) \['b'\] have no column"),
    ("https://h/{a}", {"a": [1], "typo": [2]}, {}, ValueError, r"column\(s\) \['typo'\] are not used"),
    ("https://h/{a}/{b}", {"a": [1, 2], "b": [1]}, {}, ValueError, "unequal lengths"),
    ("https://h/{a", {"a": [1]}, {}, ValueError, "unbalanced brace"),
    ("https://h/a}", {}, {"length": 1}, ValueError, "unbalanced brace"),
    ("ftp://h/{a}", {"a": [1]}, {}, ValueError, "invalid first location"),
    ("/f/{index}", {}, {}, ValueError, "length= is required"),
    ("https://h/{a}", {"a": [1.5]}, {}, TypeError, "only ints or only strs, got float"),
    ("https://h/{a}", {"a": [1, "x"]}, {}, TypeError, "only ints or only strs"),
    ("https://h/{a}", {"a": np.array([1.0])}, {}, TypeError, "numpy dtype float64"),
    ("https://h/{a}", {"a": "abc"}, {}, TypeError, "must be a sequence"),
])
def test_template_validation(template, columns, kwargs, error, message):
    with pytest.raises(error, match=message):
        Template(template, columns, "url" if template.startswith(("http", "ftp")) else "path", **kwargs)


def test_index_out_of_range():
    with pytest.raises(IndexError, match="index 2 is out of range for 2 items"):
        Template("/f/{a}", {"a": [1, 2]}, "path").location(2)


@given(st.text(min_size=1))
def test_property_a_url_value_never_leaves_its_component(value):
    if value in (".", ".."):
        return
    t = Template("https://h.example/a/{v}/b?q={v2}#f", {"v": [value], "v2": [value]}, "url")
    parts = urlsplit(t.location(0))
    segments = parts.path.split("/")
    assert len(segments) == 4 and unquote(segments[2]) == value
    assert parts.netloc == "h.example" and parts.fragment == "f"
    assert parts.query.startswith("q=") and "&" not in parts.query and unquote(parts.query[2:]) == value


@given(st.text(min_size=1).filter(lambda v: v not in (".", "..") and not set(v) & {"/", "\\", "\x00"}))
def test_property_a_path_value_never_leaves_its_directory(value):
    import posixpath

    location = Template("/root/{v}/file", {"v": [value]}, "path").location(0)
    assert posixpath.dirname(posixpath.dirname(location)) == "/root"


def test_a_first_url_whose_host_cannot_be_encoded_is_refused_up_front():
    with pytest.raises(ValueError, match=r"invalid first location: .* is not an http"):
        Template("http://\u2603\ufe0f.example/{key}", {"key": ["a"]}, "url")  # IDNA refuses this host
