def tail_value(lst, c):
    return lst[c:]
