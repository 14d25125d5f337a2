from keen_owl.core import compute_capitalize


def test_compute_capitalize():
    assert compute_capitalize('hello') == 'Hello'
    assert compute_capitalize('') == ''


def test_compute_capitalize_hidden():
    assert compute_capitalize('a') == 'A'
    assert compute_capitalize('world') == 'World'
    assert compute_capitalize('xY') == 'XY'
