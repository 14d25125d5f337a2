def min_list_value(b):
    m = 0
    for data in b:
        if data < m:
            m = data
    return m
