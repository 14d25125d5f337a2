from merry_seal.utils import word_count_value


def test_word_count_value():
    assert word_count_value('a bc d') == 3
    assert word_count_value('') == 0


def test_word_count_value_hidden():
    assert word_count_value('hello') == 1
    assert word_count_value('x y') == 2
    assert word_count_value('one two three four') == 4
