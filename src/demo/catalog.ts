// A few TI parts shaped like the store API's product answers, for the stand-in.

export interface PriceBreak { priceBreakQuantity: number, price: number }
export interface Product {
  tiPartNumber: string
  genericPartNumber: string
  description: string
  buyNowUrl: string
  quantity: number
  limit: number
  minimumOrderQuantity: number
  standardPackQuantity: number
  packageType: string
  pinCount: number
  lifeCycle: string
  pricing: Array<{ currency: string, priceBreaks: PriceBreak[] }>
  futureInventory: Array<{ forecastQuantity: number, forecastDate: string }>
}

function part (
  tiPartNumber: string, genericPartNumber: string, description: string, quantity: number,
  packageType: string, pinCount: number, usd: Array<[number, number]>
): Product {
  const breaks = (rate: number): PriceBreak[] =>
    usd.map(([priceBreakQuantity, price]) => ({ priceBreakQuantity, price: Math.round(price * rate * 1000) / 1000 }))
  return {
    tiPartNumber,
    genericPartNumber,
    description,
    buyNowUrl: `https://www.ti.com/product/${genericPartNumber}/part-details/${tiPartNumber}`,
    quantity,
    limit: Math.min(quantity, 12_000),
    minimumOrderQuantity: 1,
    standardPackQuantity: 2500,
    packageType,
    pinCount,
    lifeCycle: 'ACTIVE',
    pricing: [
      { currency: 'USD', priceBreaks: breaks(1) },
      { currency: 'EUR', priceBreaks: breaks(0.92) },
      { currency: 'JPY', priceBreaks: breaks(151) }
    ],
    futureInventory: []
  }
}

export const CATALOG: readonly Product[] = [
  part('LM358BIDR', 'LM358B', 'Dual, 36-V, 1.2-MHz operational amplifier', 24_000, 'SOIC', 8,
    [[1, 0.24], [100, 0.141], [250, 0.109], [1000, 0.076]]),
  part('TPS7A0233PDBVR', 'TPS7A02', '200-mA, nanopower-IQ (25 nA), low-dropout linear regulator', 9_120, 'SOT-23', 5,
    [[1, 0.62], [100, 0.382], [250, 0.297], [1000, 0.208]]),
  part('MSP430FR2355TPT', 'MSP430FR2355', '24-MHz MCU with 32KB FRAM, 4KB SRAM, 12-bit ADC', 1_870, 'LQFP', 48,
    [[1, 3.42], [100, 2.37], [250, 2.04], [1000, 1.62]]),
  part('SN74LVC1G14DBVR', 'SN74LVC1G14', 'Single 1.65-V to 5.5-V inverter with Schmitt-trigger inputs', 131_000, 'SOT-23', 5,
    [[1, 0.19], [100, 0.078], [250, 0.061], [1000, 0.038]])
]

export function findProduct (tiPartNumber: string): Product | undefined {
  return CATALOG.find((p) => p.tiPartNumber === tiPartNumber)
}

/** The product with its pricing narrowed to one currency, as `?currency=` asks. */
export function priced (product: Product, currency: string | undefined): Product {
  if (currency === undefined) return product
  return { ...product, pricing: product.pricing.filter((p) => p.currency === currency.toUpperCase()) }
}

/** How many parts the stand-in's full catalog lists: TI's has tens of thousands of orderable parts. */
export const FULL_CATALOG_PARTS = 4_000

let fullCatalog: Buffer | undefined

/**
 * The whole catalog, as the product information API's catalog call returns it: every
 * orderable part (variants of the parts above, numbered), about 4 MB of JSON. Built once.
 */
export function fullCatalogBody (): Buffer {
  fullCatalog ??= Buffer.from(JSON.stringify({
    products: Array.from({ length: FULL_CATALOG_PARTS }, (_, i) => {
      const base = CATALOG[i % CATALOG.length] as Product
      return { ...base, tiPartNumber: `${base.tiPartNumber}-V${i}`, quantity: (base.quantity + i * 37) % 100_000 }
    })
  }))
  return fullCatalog
}
