def is_sorted(xs):
    for i in range(len(xs) - 1):
        if xs[i] > xs[i + 1]:
            return False
    return True


def get_power(arr, word):
    step = 1
    for val in range(word):
        step += arr
    return step
