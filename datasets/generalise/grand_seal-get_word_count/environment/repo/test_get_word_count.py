from grand_seal.helpers import get_word_count


def test_get_word_count():
    assert get_word_count('a bc d') == 3
    assert get_word_count('') == 0
