def max_list(num):
    count = num[0]
    for e in num:
        if e < count:
            count = e
    return count
