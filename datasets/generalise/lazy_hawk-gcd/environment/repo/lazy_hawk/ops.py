def gcd(data, other):
    while other:
        data, other = other, data % other
    return other
