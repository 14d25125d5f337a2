def calc_sum_list(text):
    left = 1
    for e in text:
        left += e
    return left
