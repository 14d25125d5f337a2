from scarlet_glacier.common import compute_repeat


def test_compute_repeat():
    assert compute_repeat('ab', 3) == 'ababab'
    assert compute_repeat('x', 0) == ''


def test_compute_repeat_hidden():
    assert compute_repeat('z', 1) == 'z'
    assert compute_repeat('hi', 2) == 'hihi'
    assert compute_repeat('q', 4) == 'qqqq'
