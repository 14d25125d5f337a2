from merry_wolf.ops import first_word_value


def test_first_word_value():
    assert first_word_value('hello big world') == 'hello'
