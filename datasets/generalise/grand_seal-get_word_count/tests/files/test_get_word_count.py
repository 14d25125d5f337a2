from grand_seal.helpers import get_word_count


def test_get_word_count():
    assert get_word_count('a bc d') == 3
    assert get_word_count('') == 0


def test_get_word_count_hidden():
    assert get_word_count('hello') == 1
    assert get_word_count('x y') == 2
    assert get_word_count('one two three four') == 4
