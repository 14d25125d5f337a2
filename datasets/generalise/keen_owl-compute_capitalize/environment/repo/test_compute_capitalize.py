from keen_owl.core import compute_capitalize


def test_compute_capitalize():
    assert compute_capitalize('hello') == 'Hello'
    assert compute_capitalize('') == ''
