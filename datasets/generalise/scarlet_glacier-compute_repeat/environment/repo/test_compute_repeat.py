from scarlet_glacier.common import compute_repeat


def test_compute_repeat():
    assert compute_repeat('ab', 3) == 'ababab'
    assert compute_repeat('x', 0) == ''
