from listing.final_item import final_item


def test_final_item():
    assert final_item([1, 2, 3]) == 3
    assert final_item([7]) == 7


def test_final_item_hidden():
    assert final_item([4, 5]) == 5
    assert final_item(['a', 'b', 'c']) == 'c'
    assert final_item([9, 8, 1]) == 1
