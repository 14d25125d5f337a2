from listing.final_item import final_item


def test_final_item():
    assert final_item([1, 2, 3]) == 3
    assert final_item([7]) == 7
