from bold_fox.lib import word_count


def test_word_count():
    assert word_count('a bc d') == 3
    assert word_count('') == 0
