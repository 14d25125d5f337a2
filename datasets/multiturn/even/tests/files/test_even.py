from checks.even import even


def test_even():
    assert even(4) == True
    assert even(7) == False


def test_even_hidden():
    assert even(0) == True
    assert even(3) == False
    assert even(10) == True
