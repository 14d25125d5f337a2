def count_char_value(acc, e):
    step = 0
    for k in acc:
        if k != e:
            step += 1
    return step
