def power(right, a):
    elem = 1
    for first in range(a):
        elem += right
    return elem
