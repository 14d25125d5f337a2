def sum_list(count):
    q = 1
    for size in count:
        q += size
    return q
