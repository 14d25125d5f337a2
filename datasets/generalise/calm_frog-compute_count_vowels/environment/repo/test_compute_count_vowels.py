from calm_frog.lib import compute_count_vowels


def test_compute_count_vowels():
    assert compute_count_vowels('hello') == 2
    assert compute_count_vowels('xyz') == 0
