from noble_seal.utils import get_count_vowels


def test_get_count_vowels():
    assert get_count_vowels('hello') == 2
    assert get_count_vowels('xyz') == 0


def test_get_count_vowels_hidden():
    assert get_count_vowels('banana') == 3
    assert get_count_vowels('a') == 1
    assert get_count_vowels('queue') == 4
