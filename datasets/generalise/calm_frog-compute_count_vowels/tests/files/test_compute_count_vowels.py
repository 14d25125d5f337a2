from calm_frog.lib import compute_count_vowels


def test_compute_count_vowels():
    assert compute_count_vowels('hello') == 2
    assert compute_count_vowels('xyz') == 0


def test_compute_count_vowels_hidden():
    assert compute_count_vowels('banana') == 3
    assert compute_count_vowels('a') == 1
    assert compute_count_vowels('queue') == 4
