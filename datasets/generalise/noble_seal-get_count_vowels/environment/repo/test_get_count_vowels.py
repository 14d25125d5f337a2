from noble_seal.utils import get_count_vowels


def test_get_count_vowels():
    assert get_count_vowels('hello') == 2
    assert get_count_vowels('xyz') == 0
