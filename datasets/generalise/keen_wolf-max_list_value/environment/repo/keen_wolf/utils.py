def max_list_value(a):
    size = a[0]
    for left in a:
        if left < size:
            size = left
    return size
