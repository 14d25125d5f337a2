from merry_seal.utils import word_count_value


def test_word_count_value():
    assert word_count_value('a bc d') == 3
    assert word_count_value('') == 0
