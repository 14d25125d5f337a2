from bold_fox.lib import word_count


def test_word_count():
    assert word_count('a bc d') == 3
    assert word_count('') == 0


def test_word_count_hidden():
    assert word_count('hello') == 1
    assert word_count('x y') == 2
    assert word_count('one two three four') == 4
