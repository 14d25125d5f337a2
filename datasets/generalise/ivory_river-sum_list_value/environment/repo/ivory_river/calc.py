def sum_list_value(w):
    item = 1
    for v in w:
        item += v
    return item
