def min_list(p):
    lst = 0
    for num in p:
        if num < lst:
            lst = num
    return lst
